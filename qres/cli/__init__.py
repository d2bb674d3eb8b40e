"""The ``qres`` command line: a thin layer over the library. :mod:`qres.cli.group` holds the
group, its options and the one-line error handling; each command lives in a module named after
it (``index``, ``info``, ``compact``, ``search``, ``evaluate``, ``compare_runs``,
``tune_fusion``, ``serve``, ...; what evaluate and compare-runs share in ``scores``; training
commands in :mod:`qres.training.commands`) and parses its options, calls library code and
prints. ``cli`` and ``Terminated`` are imported from the group on first use, so that a
Ctrl-C while the command line loads ends it quietly (:func:`main`)."""

import signal
import sys

__all__ = ["Terminated", "cli", "main"]


def main() -> None:
    """The ``qres`` program."""
    try:
        from qres.cli.group import main as run
    except KeyboardInterrupt:  # pressed while the modules load: nothing has started yet
        _interrupted()
    try:
        run()
    except KeyboardInterrupt:  # one click did not turn into its own exit (pressed as it starts)
        _interrupted()
    finally:  # the command is done: a signal now would only make its exit a traceback
        from qres.cli.errors import ignore_stopping

        ignore_stopping()


def _interrupted() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # pressed again: no exit by the signal
    sys.exit(130)


def __getattr__(name: str):
    if name not in ("cli", "Terminated"):
        raise AttributeError(f"module 'qres.cli' has no attribute {name!r}")
    from qres.cli import group

    return getattr(group, name)
