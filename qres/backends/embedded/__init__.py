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
  beside the live index and swapped in;
- :mod:`~qres.backends.embedded.candidates`: a search's hits, read lazily, and
  :mod:`~qres.backends.embedded.landings`: where they lead when duplicate links are followed;
- :mod:`~qres.backends.embedded.snapshot`: one generation of the index as reads see it, and
  the commits it follows.

A search reads one consistent snapshot (:class:`~qres.backends.embedded.snapshot.Snapshot`):
a reader notices a swapped-in index (a new directory) on its next call and reopens it, while
calls under way finish with the objects they started with; a call that overlapped a swap,
whether it finished or failed, is read again on the new index.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import tantivy

from qres import paths
from qres.backends.base import (
    Backend,
    BackendError,
    Candidates,
    Hit,
    IndexMissingError,
    check_ids,
)
from qres.backends.embedded.ann import AnnFiles
from qres.backends.embedded.candidates import TantivyCandidates, fetch_from
from qres.backends.embedded.directory import (
    FORMAT,
    FORMATS,
    LOCK_FILE,
    REMOVED_BY,
    WORK_DIRS,
    WriterLock,
    check_replaceable,
    check_settings,
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
    id_query,
)
from qres.backends.embedded.rebuild import Rebuilds
from qres.backends.embedded.snapshot import Snapshot
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
_READ_TRIES = 5  # a read that overlapped a swap is read again, at most this often in all


def _engine_failure(path: Path, err: Exception) -> str:
    """What stopped tantivy's writer. When its writer thread died of an I/O error tantivy
    says only that ("An index writer was killed"): name the likely cause instead."""
    if "writer was killed" not in str(err):
        return str(err)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY:
        return f"a file of the index reached the file-size limit (ulimit -f) of {limit:,} bytes"
    with contextlib.suppress(OSError):
        free = shutil.disk_usage(path).free
        if free < 64 * 2**20:
            return f"the disk is full ({free / 2**20:.0f} MB free)"
    return "its writer thread stopped on an I/O error"


def _writer_size() -> tuple[int, int]:
    """(heap bytes, threads) of the tantivy writer: a thread per two cores up to 8, 128 MB
    of indexing memory each (tantivy splits the heap among its threads)."""
    threads = max(1, min(8, (os.cpu_count() or 1) // 2))
    return threads * _WRITER_HEAP, threads


class EmbeddedBackend(WriterLock, Rebuilds, AnnFiles, VectorFiles, Backend):
    """An index directory, opened to search and write it. Opening, writing and reading are
    here; the writer's lock, rebuilds and the vector files come from their modules."""

    name = "embedded"
    several_models = True
    metadata_is_local = True

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
        self._snapshot = Snapshot()  # what reads use: replaced whole when the index is reopened
        self._dropped_extras = False  # whether upsert said it cannot store extras
        self._reloading = threading.Lock()
        self._generation = 0
        complete_interrupted_swap(self.live_path)
        check_settings(settings)  # once, before anything is made (init_dir trusts them)
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
                named = (
                    "" if self.path == paths.default_index_dir() else f"--index-dir {self.path} "
                )
                raise IndexMissingError(
                    f"no qres index at {self.path}: create one with `qres {named}index CORPUS`"
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
        self._fields = fields_of(engine)  # an index made before extras or closed lacks them
        self.stores_extras = "extras" in self._fields
        self._identity = identity
        # Last, in one assignment: a read that takes the new snapshot sees all of the above.
        # The swapped-in index numbers its rows anew: nothing read from the old rows holds.
        # (a read-only index is opened through links made once: it is taken not to change)
        watched = engine if self._view is None else None
        self._snapshot = Snapshot(index, "closed" in self._fields, watched)
        self._generation += 1
        if old_view is not None:
            shutil.rmtree(old_view, ignore_errors=True)

    def _open_tantivy(self, engine: Path) -> tantivy.Index:
        if os.access(engine, os.W_OK):
            try:
                return tantivy.Index.open(str(engine))
            except ValueError as err:
                if "Lockfile" not in str(err):
                    raise _cannot_open(engine, err) from None
        # A read-only index: tantivy wants to create lock files beside the index files, so
        # open a private directory of links to them (a read-only index never changes).
        self._view = tempfile.mkdtemp(prefix="qres-readonly-")
        for name in os.listdir(engine):
            if not name.endswith(".lock"):
                os.symlink(engine.resolve() / name, Path(self._view) / name)
        try:
            return tantivy.Index.open(self._view)
        except ValueError as err:
            raise _cannot_open(engine, err) from None

    def _replaced(self) -> bool:
        """Whether a rebuild or compaction swapped a new directory in since we opened."""
        now = identity_of(self.path)
        return now is not None and now != self._identity

    def _follow_swaps(self) -> None:
        if self._index is None:
            raise BackendError(f"the index at {self.live_path} is not open")
        if self._rebuilding or self._lock is not None:
            return
        now = identity_of(self.path)  # one stat: this runs before every read
        if now is None:  # a swap between its renames, or one a crash stopped there
            complete_interrupted_swap(self.live_path)
            now = identity_of(self.path)
        if now is not None and now != self._identity:
            with self._reloading:  # one thread reopens; the others then see it done
                if self._replaced():
                    self._meta = read_meta(self.path / "meta.json")
                    self._load_engine()
        else:
            self._snapshot.follow_commits(lambda: not self._replaced())

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

    def analysis(self) -> Callable[[Sequence[Question]], list[tuple[str, str, str]]]:
        return partial(analyze, analyzer=self.analyzer)

    def upsert(
        self,
        questions: Sequence[Question],
        vectors: np.ndarray | None = None,
        terms: Sequence[tuple[str, str, str]] | None = None,
    ) -> None:
        check_ids(questions)
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
                # a row keeps its question: the ANN file written at commit names it from here
                self._snapshot.id_at_slot.update(zip(slots, [q.id for q in questions], strict=True))
        if not self.stores_extras and not self._dropped_extras and any(q.extras for q in questions):
            self._dropped_extras = True
            log.warning(
                "%s was made before qres stored extras (answer counts, scores): they are not "
                "stored; rebuild it (qres index CORPUS --rebuild) to store them",
                self.path,
            )
        try:
            for question, slot, pair in zip(questions, slots, terms, strict=True):
                writer.delete_documents_by_term("id", question.id)
                writer.add_document(document(question, pair, slot, self._fields))
        except ValueError as err:
            raise BackendError(
                f"{self.live_path}: cannot write the index ({_engine_failure(self.path, err)}); "
                f"{self.kept_on_failure()}"
            ) from None

    def delete(self, ids: Sequence[str]) -> None:
        writer = self._get_writer()
        for qid in ids:
            writer.delete_documents_by_term("id", qid)

    def ids_not_in(self, ids: Collection[str]) -> list[str]:
        self._follow_swaps()
        searcher = self._snapshot.index.searcher()
        query = tantivy.Query.all_query()
        if ids:
            named = id_query(self._schema, ids)
            query = tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, query), (tantivy.Occur.MustNot, named)]
            )
        hits = searcher.search(query, max(1, searcher.num_docs), count=False).hits
        return [searcher.doc(address).to_dict()["id"][0] for _, address in hits]

    def commit(self) -> None:
        try:
            for fd in self._vector_fds.values():
                os.fsync(fd)
            if self._writer is not None:
                writer, self._writer = self._writer, None
                writer.commit()
                writer.wait_merging_threads()
        except (OSError, ValueError) as err:
            cause = getattr(err, "strerror", None) or _engine_failure(self.path, err)
            raise BackendError(
                f"{self.path}: commit failed ({cause}); the index keeps what was committed before"
            ) from None
        if self._index is not None:
            self._snapshot.reload()
        self._update_ann()

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
            allowed = id_query(self._schema, only_ids)
            clauses = [(tantivy.Occur.Must, tantivy.Query.const_score_query(allowed, 0.0))]
            if query is not None:
                clauses.append((tantivy.Occur.Should, query))
            query = tantivy.Query.boolean_query(clauses)
        snapshot = self._snapshot
        if query is None or k <= 0:
            return TantivyCandidates(self, snapshot, None, [], query_vector)
        searcher, landings = snapshot.reading  # what searches learn of this searcher's hits
        # tantivy sets aside room for k hits up front: a k past the index's size (a typo's
        # -k 3000000000) would abort the process, not fail.
        hits = searcher.search(query, min(k, max(1, searcher.num_docs)), count=False).hits
        return TantivyCandidates(self, snapshot, searcher, hits, query_vector, landings)

    def search(self, text: str, k: int, only_ids: Sequence[str] | None = None) -> list[Hit]:
        found = self.candidates(text, k, only_ids)
        ids = found.ids(range(len(found)))
        return [Hit(qid, float(score)) for qid, score in zip(ids, found.scores, strict=True)]

    def _docs(self, ids: Sequence[str], snapshot: Snapshot | None = None) -> dict[str, dict]:
        if not ids:
            return {}
        searcher = (snapshot or self._snapshot).index.searcher()
        query = id_query(self._schema, ids)
        result = searcher.search(query, len(set(ids)), count=False)
        docs = (searcher.doc(addr).to_dict() for _, addr in result.hits)
        return {doc["id"][0]: doc for doc in docs}

    @property
    def completes_first_words(self) -> bool:
        return "title_words" in self._fields

    def title_words(self, prefix: str, n: int) -> list[tuple[str, int]]:
        if not self.completes_first_words or not prefix:
            return []

        def read():
            # Counted in the live documents (the term dictionary's own counts keep deleted
            # ones until a merge), as Elasticsearch's terms aggregation counts them.
            searcher, _ = self._snapshot.reading
            return searcher.terms_with_prefix(
                "title_words", prefix, filter_query=tantivy.Query.all_query(), limit=n
            )

        return [(word, count) for word, count in self._consistent(read) if count]

    def fetch(self, ids: Sequence[str]) -> dict[str, Question]:
        if not ids:
            self._follow_swaps()
            return {}

        def read():
            snapshot = self._snapshot
            return fetch_from(snapshot, snapshot.index.searcher(), ids)

        return self._consistent(read)

    def _consistent(self, read):
        """``read()`` on one snapshot of the index: read again if the index was swapped or
        reopened (by another thread) meanwhile, whether the read finished or failed (a read
        overlapping a swap may mix the two indexes' files and fail)."""
        for attempt in range(_READ_TRIES):
            self._follow_swaps()
            generation = self._generation
            try:
                out = read()
            except Exception:
                if attempt + 1 == _READ_TRIES or not self._swapped_since(generation, True):
                    raise
                time.sleep(0.001 * 2**attempt)  # let the swap's other renames land
                continue
            if not self._swapped_since(generation):
                break
        return out

    def _swapped_since(self, generation: int, failed: bool = False) -> bool:
        """Whether the index was reopened, or another process swapped a new one in, since
        the read of ``generation`` began; for a read that ``failed``, also whether a swap is
        between its two renames now (the files the read reopened were not there)."""
        if generation != self._generation or generation % 2:
            return True
        if self._lock is not None:
            return False
        return self._replaced() or (failed and not self.path.exists())

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
        self._snapshot = Snapshot()
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


def _cannot_open(engine: Path, err: Exception) -> BackendError:
    if "Permission denied" in str(err):  # tantivy's own message is a Rust debug dump
        return BackendError(
            f"{engine}: cannot open the index: permission denied reading its files (made by "
            f"another user? let this one read them: chmod -R a+rX {engine.parent})"
        )
    return BackendError(f"{engine}: cannot open the index ({err})")
