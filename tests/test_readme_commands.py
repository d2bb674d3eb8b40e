"""The README's test command: it brings the browser the widget tests drive, and CI runs it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.test_widget import CHROMEDRIVER, CHROMIUM

REPO = Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    setup = (REPO / "README.md").read_text(encoding="utf-8").split("## Set-up: the two commands")[1]
    return re.findall(r"```bash\n(.*?)\n```", setup, re.S)[1]


def browser_step(tmp_path: Path, have_driver: bool) -> list[str]:
    """Run the command's first step with stand-ins for apt-get (and chromedriver)."""
    step = readme_test_command().split(" && python3 -m venv")[0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "apt-calls"
    names = ["apt-get"] + (["chromedriver"] if have_driver else [])
    for name in names:
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n')
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": str(bin_dir)}  # only the stand-ins: not the system's driver
    subprocess.run(["/bin/bash", "-c", step], env=env, check=True)
    return calls.read_text().splitlines() if calls.exists() else []


def test_the_test_command_installs_the_browser_when_it_is_missing(tmp_path):
    calls = browser_step(tmp_path, have_driver=False)
    assert calls == ["apt-get update", "apt-get install -y chromium chromium-driver"]
    # Debian's packages put them where the widget tests look.
    assert (Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")) == (CHROMIUM, CHROMEDRIVER)


def test_the_test_command_leaves_an_installed_browser_alone(tmp_path):
    assert browser_step(tmp_path, have_driver=True) == []


def test_ci_runs_the_readme_test_command_as_written():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert 'bash -euo pipefail -c "$test_command"' in ci
    assert "pytest" not in ci.split("test_command=")[0]  # no second copy of the command
    assert readme_test_command().endswith(".venv/bin/pytest -q")
