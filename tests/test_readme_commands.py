"""The README's two set-up commands: where a newcomer finds them, and the test command that CI
runs as written, after installing the browser the widget tests drive and requiring it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests import test_widget
from tests.test_widget import CHROMEDRIVER, CHROMIUM

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CI = REPO / ".ci" / "run"


def setup_section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("## Set-up: the two commands")[1].split("\n## ")[0]


def readme_test_command() -> str:
    """The second bash block of the set-up section, as .ci/run reads it."""
    setup = README.read_text(encoding="utf-8").split("## Set-up: the two commands")[1]
    return re.findall(r"```bash\n(.*?)\n```", setup, re.S)[1]


def test_the_setup_section_holds_exactly_the_two_commands():
    assert len(re.findall(r"```bash\n(.*?)\n```", setup_section(), re.S)) == 2


def test_both_commands_are_on_the_readmes_first_screen():
    lines = README.read_text(encoding="utf-8").splitlines()
    heading = lines.index("## Set-up: the two commands")
    test_command = lines.index(readme_test_command())  # the second, after the main job
    assert heading < test_command < 60


def test_the_test_command_needs_no_root_and_runs_lint_format_and_the_suite():
    command = readme_test_command()
    assert not re.search(r"\b(apt-get|apt|sudo)\b", command)
    steps = [s.strip() for s in command.split("&&")]
    assert steps[0] == "python3 -m venv .venv"
    assert steps[2:4] == [".venv/bin/ruff check .", ".venv/bin/ruff format --check ."]
    assert steps[4].startswith(".venv/bin/pytest -q")


def ci_browser_step(tmp_path: Path, have_driver: bool) -> list[str]:
    """Run .ci/run's browser step with stand-ins for apt-get (and chromedriver)."""
    ci = CI.read_text(encoding="utf-8")
    step = re.search(r"^if ! command -v chromedriver .*?^fi$", ci, re.S | re.M)[0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "apt-calls"
    for name in ["apt-get"] + (["chromedriver"] if have_driver else []):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n')
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": str(bin_dir)}  # only the stand-ins: not the system's driver
    subprocess.run(["/bin/bash", "-c", step], env=env, check=True)
    return calls.read_text().splitlines() if calls.exists() else []


def test_ci_installs_the_browser_when_it_is_missing(tmp_path):
    calls = ci_browser_step(tmp_path, have_driver=False)
    assert calls == ["apt-get update -qq", "apt-get install -y -qq chromium chromium-driver"]
    # Debian's packages put them where the widget tests look.
    assert (Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")) == (CHROMIUM, CHROMEDRIVER)


def test_ci_leaves_an_installed_browser_alone(tmp_path):
    assert ci_browser_step(tmp_path, have_driver=True) == []


def test_ci_requires_the_browser_then_runs_the_readme_test_command_as_written():
    ci = CI.read_text(encoding="utf-8")
    before, _, after = ci.partition("test_command=")
    assert "export QRES_REQUIRE_BROWSER=1" in before
    assert 'bash -euo pipefail -c "$test_command"' in after
    assert "pytest" not in before  # no second copy of the command


def test_without_the_browser_the_widget_tests_skip_naming_the_install(monkeypatch, tmp_path):
    monkeypatch.setattr(test_widget, "CHROMEDRIVER", tmp_path / "chromedriver")
    monkeypatch.delenv(test_widget.REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium chromium-driver"):
        test_widget.need_browser()
    monkeypatch.setenv(test_widget.REQUIRE, "1")  # as .ci/run sets it
    with pytest.raises(pytest.fail.Exception, match="QRES_REQUIRE_BROWSER is set"):
        test_widget.need_browser()
