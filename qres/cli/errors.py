"""How a command's failure reaches the user: one ``error:`` line and exit status 1 for what
they can act on and for a bug (its traceback kept in a file for a report; raised as it is
with ``QRES_TRACEBACK=1``), one ``interrupted:`` line for Ctrl-C and SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

import click

from qres.backends.base import BackendError
from qres.cli.output import console
from qres.corpus.readers import CorpusError
from qres.encoders.runtime import EncoderError
from qres.workers import STOPPING

COMMITTED_IS_KEPT = "everything committed before this point is kept"


class CommandError(Exception):
    """What a command reports to the user: printed as one ``error:`` line, exit status 1."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP: the terminal closed), raised where the program is so that it
    cleans up as after Ctrl-C."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__()
        self.signum = signum


def raise_terminated(signum, _frame):
    raise Terminated(signum)


def ignore_stopping() -> None:
    """Ctrl-C, SIGTERM and SIGHUP ignored from here on: the command is done, or saying how
    it stopped (one arriving now made its exit a traceback, or its status the signal's)."""
    for stopping in STOPPING:
        signal.signal(stopping, signal.SIG_IGN)


@contextlib.contextmanager
def said_in_one_line(ctx: click.Context):
    """Errors raised inside, each as one line and its exit status (an interruption says what
    ``ctx.obj.on_interrupt`` says is kept)."""
    try:
        yield
    except (BackendError, CorpusError, EncoderError, CommandError) as err:
        _failed(str(err))
    except OSError as err:  # a full disk, a read-only or vanished file, …
        where = f"{err.filename}: " if err.filename else ""
        _failed(f"{where}{err.strerror or err}")
    except ValueError as err:  # what the search engine reports as a failure
        _failed(str(err))
    except (KeyboardInterrupt, ImportError) as err:
        # a Ctrl-C while onnxruntime's native module loads comes as an ImportError from it
        stop = err.__cause__ if isinstance(err, ImportError) else err
        if not isinstance(stop, KeyboardInterrupt):
            _unexpected(err)
        ignore_stopping()  # Ctrl-C again: no "Aborted!", exit 1; SIGTERM: no exit by it
        kept = getattr(ctx.obj, "on_interrupt", COMMITTED_IS_KEPT)
        console.print(f"interrupted: {kept}")
        sys.exit(128 + stop.signum if isinstance(stop, Terminated) else 130)
    except (click.ClickException, click.exceptions.Exit, click.Abort):  # --help, usage
        raise
    except Exception as err:
        _unexpected(err)


def _failed(message: str) -> None:
    ignore_stopping()  # a Ctrl-C as it exits would make click add "Aborted!"
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _unexpected(err: Exception) -> None:
    if os.environ.get("QRES_TRACEBACK"):
        raise err
    _failed(_bug_report(err))


def _bug_report(err: Exception) -> str:
    """What a user is told of an error qres did not expect, its traceback written to a file
    they can send with a report."""
    import tempfile
    import traceback

    said = f"qres failed unexpectedly ({type(err).__name__}: {err})"
    try:
        with tempfile.NamedTemporaryFile(
            "w", prefix="qres-error-", suffix=".txt", delete=False
        ) as report:
            report.write("".join(traceback.format_exception(err)))
    except OSError:
        return f"{said}; QRES_TRACEBACK=1 shows where"
    return f"{said}: a bug; please report it with {report.name} (its traceback)"
