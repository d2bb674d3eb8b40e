"""Worker processes that a terminal's Ctrl-C does not reach.

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
    # Starting, multiprocessing's resource tracker unblocks Ctrl-C in the thread that starts it
    resource_tracker.ensure_running()
    if receiver:
        forever = threading.Event()
        threading.Thread(target=forever.wait, name="qres-ctrl-c", daemon=True).start()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def ctrl_c_released() -> None:
    """Let Ctrl-C through again in a process born with it held (one held back meanwhile
    arrives now)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
