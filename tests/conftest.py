"""Shared fixtures: the data directory beside the repository, and the command line."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from qres.workers import STOPPING

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(autouse=True, scope="session")
def private_qres_home(tmp_path_factory):
    """QRES_HOME is a folder of the test run's own unless a test sets another: no test writes
    to the user's data directory, and the two processes of ``pytest -n 2`` never share one.
    The terminal's size is not set either, as in a plain run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QRES_HOME", str(tmp_path_factory.mktemp("qres-home")))
        # pytest-xdist's workers are given COLUMNS=80 and LINES=24: without them the output
        # checked under -n 2 is the output of a plain run (a pipe: whole lines)
        patch.delenv("COLUMNS", raising=False)
        patch.delenv("LINES", raising=False)
        # a bug in qres fails a test with its traceback, not the one line a user is shown
        patch.setenv("QRES_TRACEBACK", "1")
        yield


@pytest.fixture(autouse=True, scope="session")
def stopping_signals_as_a_terminal_gives_them():
    """A test run started in the background (`pytest ... &`) inherits Ctrl-C ignored, and so
    would every process its tests start: the tests that press Ctrl-C need it as a program run
    from a terminal has it. What each test starts with (:func:`ctrl_c_as_it_was`)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return {s: signal.getsignal(s) for s in STOPPING}


@pytest.fixture(autouse=True)
def ctrl_c_as_it_was(stopping_signals_as_a_terminal_gives_them):
    """A run of the command line in this process leaves Ctrl-C, SIGTERM and SIGHUP ignored
    (as the program does once its command is done; a module's fixture may run one before any
    test), and every process a later test starts would inherit that: its Ctrl-C tests would
    pass without Ctrl-C doing anything. Each test starts and ends with them as at first."""
    for s, handler in stopping_signals_as_a_terminal_gives_them.items():
        signal.signal(s, handler)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    for s, handler in stopping_signals_as_a_terminal_gives_them.items():
        signal.signal(s, handler)
    left = signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    # Ctrl-C left blocked in this thread would leave a later test waiting for one forever
    assert left == blocked, f"the test left signals {left - blocked} blocked in the main thread"


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
        # each run as a process of its own: the signals a finished command ignores are not
        # ignored by the next
        handlers = {s: signal.getsignal(s) for s in STOPPING}
        try:
            return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)
        finally:
            for s, handler in handlers.items():
                signal.signal(s, handler)

    return invoke
