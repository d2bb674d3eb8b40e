"""Worker processes that a terminal's Ctrl-C (and SIGTERM, SIGHUP) does not reach.

A terminal's Ctrl-C (SIGINT) reaches every process of its group. One that reached a worker
while Python started in it printed Python's own traceback above qres's one-line message, and
one that reached a worker mid-task lost its work. So ``qres index`` and ``qres serve
--workers N`` start their workers with Ctrl-C blocked, which a process inherits: an index
worker keeps it blocked for life (the main process alone stops the run), a service worker lets
it through once uvicorn handles it (:func:`ctrl_c_released`), so that a second Ctrl-C still
ends a worker that waits for its connections to close.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from multiprocessing import resource_tracker

# What stops a run: Ctrl-C, and what a service manager (SIGTERM to the whole group, as systemd
# does) or a closed terminal (SIGHUP) sends. A worker that one of them killed mid-answer left
# its pool, and the run that waited on it, hanging; its main process stops it instead.
STOPPING = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextlib.contextmanager
def ctrl_c_held(receiver: bool = False):
    """Ctrl-C held back from this thread, and from every process it starts in here.

    This process still gets its Ctrl-C at once where another of its threads is there to take
    it (Python runs the handler in the main thread all the same), else when the block lifts;
    ``receiver``: start such a thread, for a process that runs no other.
    """
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX
        yield
        return
    # Starting, multiprocessing's resource tracker unblocks SIGINT and SIGTERM in the thread
    # that starts it (it ignores those two itself): it goes first, born with SIGHUP blocked.
    if receiver:  # started before any block, which a thread inherits
        forever = threading.Event()
        threading.Thread(target=forever.wait, name="qres-ctrl-c", daemon=True).start()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def ctrl_c_released() -> None:
    """Let Ctrl-C through again in a process born with it held (one held back meanwhile
    arrives now)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)


@contextlib.contextmanager
def signals_deferred():
    """Hold Ctrl-C (SIGINT), SIGTERM and SIGHUP back until the block ends, then deliver the
    first one caught. Python runs signal handlers in the main thread only, so elsewhere there is
    nothing to hold back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {
        s: signal.signal(s, lambda signum, _frame: caught.append(signum)) for s in sorted(STOPPING)
    }
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        if caught:
            signal.raise_signal(caught[0])  # the handler restored above runs now
