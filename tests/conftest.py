"""Shared fixtures: the data directory beside the repository (../shared/data)."""

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
