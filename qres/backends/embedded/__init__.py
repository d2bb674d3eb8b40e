"""The embedded backend: a tantivy index on disk plus memory-mapped vector files.

:class:`EmbeddedBackend` opens an index directory, writes questions into it and reads them
back; the rest is a module per concept:

- :mod:`~qres.backends.embedded.documents`: what a tantivy document holds, how text becomes
  its terms;
- :mod:`~qres.backends.embedded.directory`: the index directory's layout, its metadata, the
  writer's lock and the leftovers of interrupted jobs;
- :mod:`~qres.backends.embedded.vectors`: the vector files (append-only rows) and exact
  nearest search;
- :mod:`~qres.backends.embedded.rebuild`: rebuilds, compaction and adding models, written
  beside the live index and swapped in.

A search reads one consistent snapshot: a reader notices a swapped-in index (a new
directory) on its next call and reopens it, while calls under way finish with the files they
started with.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import tantivy

from qres.backends.base import Backend, BackendError, Candidates, Hit, IndexMissingError
from qres.backends.embedded.directory import (
    FORMAT,
    FORMATS,
    LOCK_FILE,
    REMOVED_BY,
    WORK_DIRS,
    WriterLock,
    check_replaceable,
    complete_interrupted_swap,
    identity_of,
    init_dir,
    log,
    read_meta,
    write_json,
)
from qres.backends.embedded.documents import (
    ANALYZERS,
    TERMS_ANALYZER,
    analyze,
    document,
    fields_of,
    question_of,
)
from qres.backends.embedded.rebuild import Rebuilds
from qres.backends.embedded.vectors import VectorFiles
from qres.corpus.readers import Question
from qres.text import bm25_terms

__all__ = [
    "ANALYZERS",
    "FORMAT",
    "FORMATS",
    "LOCK_FILE",
    "REMOVED_BY",
    "WORK_DIRS",
    "EmbeddedBackend",
    "analyze",
    "check_replaceable",
]

_WRITER_HEAP = 128 * 1024 * 1024  # per writer thread
_MAX_QUERY_TERMS = 1024  # a 10 kB query is still searched, by its first 1024 distinct terms


def _writer_size() -> tuple[int, int]:
    """(heap bytes, threads) of the tantivy writer: a thread per two cores up to 8, 128 MB
    of indexing memory each (tantivy splits the heap among its threads)."""
    threads = max(1, min(8, (os.cpu_count() or 1) // 2))
    return threads * _WRITER_HEAP, threads


class EmbeddedBackend(WriterLock, Rebuilds, VectorFiles, Backend):
    """An index directory, opened to search and write it. Opening, writing and reading are
    here; the writer's lock, rebuilds and the vector files come from their modules."""

    name = "embedded"
    several_models = True

    def __init__(self, path: str | Path, create: bool = False, rebuild: bool = False, **settings):
        """Open the index at ``path``; with ``create``, make it (``settings``: analyzer,
        title_boost, vector_dtype) if it does not exist yet; with ``rebuild``, start a
        rebuild (see :meth:`begin_rebuild`) without reading the old index at all."""
        self.live_path = Path(path)
        self.path = self.live_path  # where reads and writes go: the staging dir in a rebuild
        self._settings = settings
        self._lock = None  # the open writer.lock while this object may write
        self._rebuilding = False
        self._index = None
        self._view: str | None = None  # read-only index: a directory of links to its files
        self._writer = None
        self._vector_fds: dict[int, int] = {}  # model number → open vector file
        self._vectors: dict[int, np.ndarray] = {}  # read-only memory maps, reopened as they grow
        # nearest()'s int8 copies of the vector files and each row's scale (rows are only
        # ever appended, so a copy grows by the new rows; dropped with the memory maps)
        self._scan_vectors: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # nearest()'s live rows (keyed by what tells they changed) and the id at each row
        self._live_slots: tuple[tuple, np.ndarray] | None = None
        self._id_at_slot: dict[int, str] = {}
        self._slot_of: dict[str, int] = {}
        self._dropped_extras = False  # whether upsert said it cannot store extras
        self._reloading = threading.Lock()
        self._generation = 0
        complete_interrupted_swap(self.live_path)
        try:
            if rebuild:
                self.begin_rebuild()
            else:
                self._open(create)
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------------

    def _open(self, create: bool) -> None:
        meta_path = self.path / "meta.json"
        if not meta_path.exists():
            if not create:
                raise IndexMissingError(
                    f"no qres index at {self.path}: create one with `qres index CORPUS`"
                )
            check_replaceable(self.path)
            self._take_lock()
            if not meta_path.exists():  # another process may have made it meanwhile
                init_dir(self.path, self._settings)
        self._meta = read_meta(meta_path)
        self._load_engine()

    def _load_engine(self) -> None:
        """(Re)open tantivy and forget the vector map: after opening or a swap. Each object
        is replaced, never emptied, so a search running in another thread finishes with the
        ones it started with."""
        engine = self.path / "tantivy"
        if not (engine / "meta.json").exists():
            raise BackendError(
                f"{self.path} is damaged: {engine / 'meta.json'} is missing; "
                "re-index with `qres index CORPUS --rebuild`"
            )
        identity = identity_of(self.path)  # taken first: a swap while we open shows next call
        old_view, self._view = self._view, None
        index = self._open_tantivy(engine)
        index.register_tokenizer(
            TERMS_ANALYZER, tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()
        )
        self.analyzer = "english" if self._meta["analyzer"] == "english" else None
        self.title_boost = float(self._meta["title_boost"])
        self._dtype = np.dtype(self._meta["vector_dtype"])
        self._vector_path = self.path / (
            "vectors.f16" if self._dtype == np.float16 else "vectors.f32"
        )
        self._generation += 1  # odd while the objects are being replaced (a seqlock)
        self._schema, self._index = index.schema, index
        self.stores_extras = "extras" in fields_of(engine)  # not in an index made before
        self._vectors, self._slot_of = {}, {}
        # the swapped-in index numbers its rows anew: nothing read from the old rows holds
        self._scan_vectors, self._live_slots, self._id_at_slot = {}, None, {}
        self._identity = identity
        self._generation += 1
        if old_view is not None:
            shutil.rmtree(old_view, ignore_errors=True)

    def _open_tantivy(self, engine: Path) -> tantivy.Index:
        if os.access(engine, os.W_OK):
            try:
                return tantivy.Index.open(str(engine))
            except ValueError as err:
                if "Lockfile" not in str(err):
                    raise BackendError(f"{engine}: cannot open the index ({err})") from None
        # A read-only index: tantivy wants to create lock files beside the index files, so
        # open a private directory of links to them (a read-only index never changes).
        self._view = tempfile.mkdtemp(prefix="qres-readonly-")
        for name in os.listdir(engine):
            if not name.endswith(".lock"):
                os.symlink(engine.resolve() / name, Path(self._view) / name)
        try:
            return tantivy.Index.open(self._view)
        except ValueError as err:
            raise BackendError(f"{engine}: cannot open the index ({err})") from None

    def _replaced(self) -> bool:
        """Whether a rebuild or compaction swapped a new directory in since we opened."""
        now = identity_of(self.path)
        return now is not None and now != self._identity

    def _follow_swaps(self) -> None:
        if self._index is None:
            raise BackendError(f"the index at {self.live_path} is not open")
        if not self._rebuilding and self._lock is None and self._replaced():
            with self._reloading:  # one thread reopens; the others then see it done
                if self._replaced():
                    self._meta = read_meta(self.path / "meta.json")
                    self._load_engine()

    # -- writing -------------------------------------------------------------------------------

    def _get_writer(self):
        if self._writer is None:
            self.acquire_write_lock()
            try:
                writer = self._index.writer(*_writer_size())
                # A writer killed in mid-commit leaves files no commit names; replaying the
                # same operations would try to create them again ("FileAlreadyExists").
                writer.garbage_collect_files()
            except ValueError as err:
                raise BackendError(f"{self.path}: cannot write the index ({err})") from None
            self._writer = writer
        return self._writer

    def analysis(self) -> Callable[[Sequence[Question]], list[tuple[str, str]]]:
        return partial(analyze, analyzer=self.analyzer)

    def upsert(
        self,
        questions: Sequence[Question],
        vectors: np.ndarray | None = None,
        terms: Sequence[tuple[str, str]] | None = None,
    ) -> None:
        if terms is None:
            terms = analyze(questions, self.analyzer)
        writer = self._get_writer()
        slots = [-1] * len(questions)
        if vectors is not None:
            rows = self._rows_per_model(vectors)
            for m, block in enumerate(rows):
                if len(block) != len(questions):
                    raise ValueError(f"{len(questions)} questions but {len(block)} vectors")
                dim = self._dim(m)
                if dim is None:
                    self.set_metadata({"vector_dim": int(block.shape[1])})
                elif block.shape[1] != dim:
                    model = self.vector_models()[m]
                    raise BackendError(
                        f"vectors have {block.shape[1]} dimensions but the index holds {dim}"
                        + (f" for model {model[:12]}" if model else "")
                        + ": re-index with `qres index --rebuild`"
                    )
            if len(questions):
                first = self._append_vectors(rows)
                slots = list(range(first, first + len(questions)))
        if not self.stores_extras and not self._dropped_extras and any(q.extras for q in questions):
            self._dropped_extras = True
            log.warning(
                "%s was made before qres stored extras (answer counts, scores): they are not "
                "stored; rebuild it (qres index CORPUS --rebuild) to store them",
                self.path,
            )
        for question, slot, pair in zip(questions, slots, terms, strict=True):
            writer.delete_documents_by_term("id", question.id)
            writer.add_document(document(question, pair, slot, self.stores_extras))

    def delete(self, ids: Sequence[str]) -> None:
        writer = self._get_writer()
        for qid in ids:
            writer.delete_documents_by_term("id", qid)

    def commit(self) -> None:
        try:
            for fd in self._vector_fds.values():
                os.fsync(fd)
            if self._writer is not None:
                writer, self._writer = self._writer, None
                writer.commit()
                writer.wait_merging_threads()
        except (OSError, ValueError) as err:
            raise BackendError(
                f"{self.path}: commit failed ({getattr(err, 'strerror', None) or err}); "
                "the index keeps what was committed before"
            ) from None
        if self._index is not None:
            self._index.reload()
        self._slot_of.clear()

    def rollback(self) -> None:
        """Drop everything written since the last commit."""
        if self._writer is not None:
            self._writer.rollback()

    # -- reading -------------------------------------------------------------------------------

    def _query(self, text: str) -> tantivy.Query | None:
        terms = list(dict.fromkeys(bm25_terms(text, self.analyzer)))[:_MAX_QUERY_TERMS]
        if not terms:
            return None
        clauses = []
        for term in terms:
            title = tantivy.Query.term_query(self._schema, "title_terms", term)
            clauses.append(
                (tantivy.Occur.Should, tantivy.Query.boost_query(title, self.title_boost))
            )
            body = tantivy.Query.term_query(self._schema, "body_terms", term)
            clauses.append((tantivy.Occur.Should, body))
        return tantivy.Query.boolean_query(clauses)

    def candidates(
        self,
        text: str,
        k: int,
        only_ids: Sequence[str] | None = None,
        query_vector: np.ndarray | None = None,
    ) -> Candidates:
        return self._consistent(lambda: self._candidates(text, k, only_ids, query_vector))

    def _candidates(self, text, k, only_ids, query_vector) -> Candidates:
        query = self._query(text)
        if only_ids is not None:
            allowed = tantivy.Query.term_set_query(self._schema, "id", list(only_ids))
            clauses = [(tantivy.Occur.Must, tantivy.Query.const_score_query(allowed, 0.0))]
            if query is not None:
                clauses.append((tantivy.Occur.Should, query))
            query = tantivy.Query.boolean_query(clauses)
        if query is None or k <= 0:
            return _TantivyCandidates(self, None, [], query_vector)
        searcher = self._index.searcher()
        hits = searcher.search(query, k, count=False).hits
        return _TantivyCandidates(self, searcher, hits, query_vector)

    def search(self, text: str, k: int, only_ids: Sequence[str] | None = None) -> list[Hit]:
        found = self.candidates(text, k, only_ids)
        ids = found.ids(range(len(found)))
        return [Hit(qid, float(score)) for qid, score in zip(ids, found.scores, strict=True)]

    def _docs(self, ids: Sequence[str]) -> dict[str, dict]:
        if not ids:
            return {}
        searcher = self._index.searcher()
        query = tantivy.Query.term_set_query(self._schema, "id", list(ids))
        result = searcher.search(query, len(set(ids)), count=False)
        docs = (searcher.doc(addr).to_dict() for _, addr in result.hits)
        return {doc["id"][0]: doc for doc in docs}

    def fetch(self, ids: Sequence[str]) -> dict[str, Question]:
        self._follow_swaps()
        return {qid: question_of(qid, doc) for qid, doc in self._docs(ids).items()}

    def _consistent(self, read):
        """``read()`` with the index's files as one snapshot: read again if the index was
        swapped or reopened (by another thread) meanwhile."""
        for _ in range(5):
            self._follow_swaps()
            generation = self._generation
            out = read()
            unchanged = generation == self._generation and generation % 2 == 0
            if unchanged and not (self._lock is None and self._replaced()):
                break
        return out

    def count(self) -> int:
        self._follow_swaps()
        return self._index.searcher().num_docs

    def metadata(self) -> dict:
        self._follow_swaps()
        return dict(self._meta)

    def set_metadata(self, values: dict) -> None:
        self.acquire_write_lock()
        self._meta.update(values)
        write_json(self.path / "meta.json", self._meta)

    def _close_files(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(ValueError):
                self._writer.rollback()
            self._writer = None
        for fd in self._vector_fds.values():
            os.close(fd)
        self._vector_fds = {}
        self._vectors = {}
        self._scan_vectors = {}
        self._live_slots = None
        self._id_at_slot = {}
        self._slot_of.clear()
        self._index = None
        if self._view is not None:
            shutil.rmtree(self._view, ignore_errors=True)
            self._view = None

    def close(self) -> None:
        """Release files and the writer's lock; an unfinished rebuild is discarded."""
        if self._rebuilding:
            self.abort_rebuild()
        self._close_files()
        self._release_lock()

    def __exit__(self, exc_type, exc, tb):
        try:
            if self._rebuilding and exc_type is None:
                self.finish_rebuild()
        finally:
            self.close()


class _TantivyCandidates(Candidates):
    """Hits of one tantivy searcher: vector slots come from the ``slot`` fast field, so only
    the ids of the rows asked for are read from the document store."""

    def __init__(self, backend: EmbeddedBackend, searcher, hits: list, query_vector=None):
        self._searcher = searcher
        self._addresses = [address for _, address in hits]
        self._slots: list[int] = []
        self._id_at_slot = backend._id_at_slot
        self.scores = np.array([score for score, _ in hits], dtype=np.float64)
        self.cosine = self.has_vector = self.cosines = None
        if query_vector is None:
            return
        queries = query_vector if isinstance(query_vector, dict) else {None: query_vector}
        models = {fp: 0 if fp is None else backend._model_number(fp) for fp in queries}
        slots = searcher.fast_field_values("slot", self._addresses) if hits else []
        slots = self._slots = [-1 if s is None else s for s in slots]
        self.cosines, self.has_vector = {}, np.ones(len(slots), bool)
        for fp, vector in queries.items():
            vectors, has = backend._vectors_at(slots, models[fp])
            self.cosines[fp] = vectors @ vector  # both sides are L2-normalised
            self.has_vector &= has
        self.cosine = next(iter(self.cosines.values()))

    def ids(self, rows: Sequence[int]) -> list[str]:
        # A row's id as the dense first stage already read it (a slot keeps its question
        # until a rebuild, which empties the map), else from the document store.
        if not self._slots:
            return [self._searcher.doc(self._addresses[i])["id"][0] for i in rows]
        known = self._id_at_slot
        return [
            known.get(self._slots[i]) or self._searcher.doc(self._addresses[i])["id"][0]
            for i in rows
        ]
