"""Shared fixtures: the data directory beside the repository, and the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data from the repository root; a missing copy fails the test, never skips it."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"test data missing: {SHARED_DATA} must hold the shared data sets")
    return SHARED_DATA


@pytest.fixture
def run(tmp_path, monkeypatch):
    """Invoke the ``qres`` command line as a user would, with a private QRES_HOME."""
    from click.testing import CliRunner

    from qres.cli import cli

    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("QRES_BACKEND", raising=False)
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)

    return invoke
