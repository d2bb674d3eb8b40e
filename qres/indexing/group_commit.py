"""Group commit: the service's one writer thread.

Writes (upserts and deletes) are queued; the writer takes everything queued (up to
``max_batch`` questions), applies it in order, commits once, and only then resolves each
write's future. A write is therefore acknowledged only once it is durable and visible to
searches, and concurrent writes share one commit. Searches never wait for the writer: they
read the last committed state while a batch is applied.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from qres.backends.base import Backend, IndexBusy
from qres.corpus import duplicate_links
from qres.corpus.readers import Question

log = logging.getLogger("qres.serve")


@dataclass(frozen=True)
class Upsert:
    questions: Sequence[Question]
    vectors: np.ndarray | None


@dataclass(frozen=True)
class Delete:
    ids: Sequence[str]


def _size(op: Upsert | Delete) -> int:
    return len(op.questions) if isinstance(op, Upsert) else len(op.ids)


class GroupCommitWriter:
    def __init__(
        self,
        backend: Backend,
        max_batch: int = 1000,
        on_commit: Callable[[int, float], None] | None = None,
    ):
        """``on_commit(n_ops, seconds)`` is called after each successful commit."""
        self.backend, self.max_batch, self.on_commit = backend, max_batch, on_commit
        self._flagged = False  # whether the index is known to hold duplicate links
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="qres-writer", daemon=True)
        self._thread.start()

    def submit(self, op: Upsert | Delete) -> Future:
        """Queue a write; its future resolves (to None) once the write is committed."""
        future: Future = Future()
        self._queue.put((op, future))
        return future

    def close(self) -> None:
        """Commit what is queued, then stop the thread."""
        self._queue.put(None)
        self._thread.join()

    def _flag_links(self, questions: Sequence[Question]) -> None:
        """Mark the index as holding duplicate links once a question naming its originals
        is written (search then follows them: qres.ranking.duplicates)."""
        if self._flagged or not duplicate_links.names_originals(questions):
            return
        if not self.backend.metadata().get(duplicate_links.INDEX_FLAG):
            self.backend.set_metadata({duplicate_links.INDEX_FLAG: True})
        self._flagged = True

    def _next_group(self, first) -> tuple[list, bool]:
        group, size, stop = [first], _size(first[0]), False
        while size < self.max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                stop = True
                break
            group.append(item)
            size += _size(item[0])
        return group, stop

    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                return
            group, stop = self._next_group(first)
            started = time.perf_counter()
            try:
                for op, _ in group:
                    if isinstance(op, Upsert):
                        self.backend.upsert(op.questions, op.vectors)
                        self._flag_links(op.questions)
                    else:
                        self.backend.delete(op.ids)
                self.backend.commit()
            except Exception as err:
                if not isinstance(err, IndexBusy):  # another writer: its answer says so
                    log.error("write batch of %d requests failed: %s", len(group), err)
                rollback = getattr(self.backend, "rollback", None)
                if rollback is not None:
                    try:
                        rollback()
                    except Exception as rollback_err:  # keep the first error for the clients
                        log.error("rollback failed: %s", rollback_err)
                for _, future in group:
                    future.set_exception(err)
                continue
            if self.on_commit:
                self.on_commit(sum(_size(op) for op, _ in group), time.perf_counter() - started)
            for _, future in group:
                future.set_result(None)
            # once the writes are acknowledged: the nearest-neighbour files take in the rows
            # written since they were (a few seconds every 10,000 rows on a big index)
            try:
                self.backend.update_nearest()
            except Exception as err:  # searches stay right without it: the writer goes on
                log.error("updating the nearest-neighbour files failed: %s", err)
