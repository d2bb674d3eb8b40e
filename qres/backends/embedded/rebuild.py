"""Rebuilds, compaction and adding models: a complete new index written beside the live one,
then swapped in.

The new index is written in ``NAME.rebuild`` while holding the live index's writer lock; then
the directories are swapped (the live one becomes ``NAME.old`` for a moment). Readers keep
seeing the old index until the swap and notice the new one (a new directory) on their next
call. Once the first rename is done the swap is only ever finished, never undone: by this
process's own cleanup on an error or signal, or after a crash by the next open
(:func:`~qres.backends.embedded.directory.complete_interrupted_swap`); a process killed
mid-job leaves its work directory behind, which the next writer removes
(:class:`~qres.backends.embedded.directory.WriterLock`).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Sequence

import numpy as np
import tantivy

from qres.backends.base import BackendError
from qres.backends.embedded.directory import (
    META_KEYS,
    check_replaceable,
    complete_interrupted_swap,
    init_dir,
    lock_dir,
    read_meta,
    sibling,
    swap_in,
)
from qres.backends.embedded.documents import question_of
from qres.workers import signals_deferred

_COPY_BATCH = 1024  # documents per batch when compaction copies an index


class Rebuilds:
    """Rebuilding, compaction and adding models of
    :class:`~qres.backends.embedded.EmbeddedBackend` (mixed into it)."""

    def kept_on_failure(self) -> str:
        """What a write that fails leaves: work built aside (a rebuild, a compaction, models
        added) is discarded whole; otherwise every commit before it stands."""
        if self.path != self.live_path:
            return f"the work built aside is discarded: {self.live_path} is as it was"
        return "everything committed before this point is kept"

    def begin_rebuild(self) -> None:
        """Send every write and read of this object to a fresh index built beside the live
        one (``NAME.rebuild``), holding the live index's writer lock; searches by other
        processes keep seeing the live index until :meth:`finish_rebuild` swaps it in."""
        self._begin_staging(self._settings)

    def _begin_staging(self, settings: dict) -> None:
        if self._rebuilding:
            raise BackendError(f"a rebuild of {self.live_path} is already under way")
        check_replaceable(self.live_path)
        staging = sibling(self.live_path, ".rebuild")
        check_replaceable(staging)
        check_replaceable(sibling(self.live_path, ".old"))
        if self._index is not None:
            self.acquire_write_lock()
        else:  # opened with rebuild=True: the old index is never read
            self._take_lock()
        self._close_files()
        shutil.rmtree(staging, ignore_errors=True)  # a crashed rebuild's leftovers
        init_dir(staging, settings)
        self.path, self._rebuilding = staging, True
        self._meta = read_meta(staging / "meta.json")
        self._load_engine()

    def finish_rebuild(self) -> None:
        """Commit the new index and swap it in for the live one, which is deleted. This
        object stays the index's writer (its lock moves with the new index)."""
        if not self._rebuilding:
            raise BackendError("no rebuild under way: start one with begin_rebuild()")
        self.commit()
        self._close_files()
        live, staging = self.live_path, self.path
        # The new index's lock, held before it becomes NAME: no other writer gets in between.
        lock = lock_dir(staging)
        with signals_deferred():  # a Ctrl-C or SIGTERM meanwhile is raised once this is done
            try:
                swap_in(live, staging)
            except BaseException:
                lock.close()
                raise
            old_lock, self._lock = self._lock, lock
            self.path, self._rebuilding = live, False
            self.swapped_in = True
        if old_lock is not None:
            old_lock.close()
        self._open(create=False)

    def abort_rebuild(self) -> None:
        """Delete the index being built; the live index stays as it was. Once the swap has
        begun (NAME is missing: it is NAME.old now) the new index is complete, and the swap is
        finished instead."""
        if not self._rebuilding:
            return
        self._close_files()
        if self.live_path.exists():
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            complete_interrupted_swap(self.live_path)
        self._release_lock()
        self.path, self._rebuilding = self.live_path, False
        with contextlib.suppress(BackendError):  # the live index may be missing or damaged
            self._open(create=False)

    def compact(self) -> dict:
        """Rewrite the index without dead vector rows (crash-safe: built aside, swapped in);
        returns the storage figures before and after."""
        self.acquire_write_lock()
        before = self.storage()
        searcher = self._index.searcher()
        total = searcher.num_docs
        addresses = [a for _, a in searcher.search(tantivy.Query.all_query(), max(total, 1)).hits]
        docs = (searcher.doc(a).to_dict() for a in addresses)
        self._rewrite(docs, None)
        return {"before": before, "after": self.storage()}

    def add_models(self, models: Sequence[dict], encode: Callable) -> int:
        """Add vectors of further ``models`` ({model_fingerprint, vector_dim, model_dir}
        each) to every question that has vectors: ``encode(questions)`` gives a
        ``{fingerprint: rows}`` dict for them; the vectors already held are copied, never
        recomputed. Built aside and swapped in like :meth:`compact`; returns the number of
        questions encoded."""
        self.acquire_write_lock()
        if not self.vector_models():
            raise BackendError("this index has no vectors to add a model's to: index with --model")
        held = set(self.vector_models())
        for m in models:
            if m["model_fingerprint"] in held:
                raise BackendError(f"the index holds model {m['model_fingerprint'][:12]} already")
        searcher = self._index.searcher()
        total = searcher.num_docs
        addresses = [a for _, a in searcher.search(tantivy.Query.all_query(), max(total, 1)).hits]
        docs = (searcher.doc(a).to_dict() for a in addresses)
        more = [*self._meta.get("more_models", []), *(dict(m) for m in models)]
        return self._rewrite(docs, encode, {"more_models": more, "format": 3})

    def _rewrite(self, docs, encode: Callable | None, changes: dict | None = None) -> int:
        """Copy ``docs`` into a fresh index swapped in at the end, with their vectors (and
        with ``encode``'s vectors of the models ``changes`` adds)."""
        fingerprints = self.vector_models()
        rows = self.storage()["vector_rows"]
        source = {m: self._vector_rows(rows, m) for m in range(len(fingerprints))}
        meta = {**self._model_meta(), **(changes or {})}
        self._begin_staging({**self._settings_of(self._meta), "meta": meta})
        encoded = 0
        try:
            batch: list[dict] = []
            for doc in docs:
                batch.append(doc)
                if len(batch) == _COPY_BATCH:
                    encoded += self._copy(batch, source, fingerprints, encode)
                    batch = []
            encoded += self._copy(batch, source, fingerprints, encode)
            self.finish_rebuild()
        except BaseException:
            self.abort_rebuild()
            raise
        return encoded

    @staticmethod
    def _settings_of(meta: dict) -> dict:
        return {k: meta[k] for k in META_KEYS}

    def _model_meta(self) -> dict:
        return {k: v for k, v in self._meta.items() if k not in META_KEYS}

    def _copy(self, docs: list[dict], source: dict, fingerprints: list, encode) -> int:
        def question(doc):
            return question_of(doc["id"][0], doc)

        held = min((len(rows) for rows in source.values()), default=0)
        with_vector = [d for d in docs if 0 <= d["slot"][0] < held]
        without = [d for d in docs if not 0 <= d["slot"][0] < held]
        if with_vector:
            slots = [d["slot"][0] for d in with_vector]
            questions = [question(d) for d in with_vector]
            vectors = {
                fp: np.asarray(source[m][slots]).reshape(len(slots), -1)
                for m, fp in enumerate(fingerprints)
            }
            if encode is not None:
                vectors.update(encode(questions))
            self.upsert(questions, vectors)
        if without:
            self.upsert([question(d) for d in without])
        return len(with_vector) if encode is not None else 0
