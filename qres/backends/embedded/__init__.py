"""The embedded backend: a tantivy index on disk plus a memory-mapped vector file.

Layout of an index directory::

    tantivy/        the BM25 index; documents store id, title, body, tags and a vector slot
    vectors.f16     (or .f32) row ``slot`` holds the vector of the document with that slot
    vectors-FP.f16  the same rows for each further model (FP: its fingerprint's first 16 hex
                    digits), written only in indexes of several models (format 3)
    meta.json       index metadata: format, analyzer, title boost, model fingerprint, vector dims
                    (``more_models``: the further models' fingerprints, dims and directories)
    writer.lock     held (flock) by the one process that may write the index

The text is stored once: title, body and tags as stored-only bytes, searched through the
analysed terms of ``title_terms``/``body_terms`` (indexed, not stored). Only ``id`` is
indexed as a whole (for replacing and restricting by id), and ``slot`` is a fast field, so
the query path ranks without touching the document store.

Text is analysed in Python by :func:`qres.text.bm25_terms` (the same function search uses)
and handed to tantivy pre-split, so the engine never parses user text as query syntax.

Vectors are only ever appended, whole rows at a time: an upsert writes its rows at the end of
the vector file and records the new slot in the document. A torn last row (a crash or a full
disk in the middle of a write) is cut off before the next append, so it can never shift later
rows. With several models every vector file gets its row at the same slot; before an append
the files are cut (or padded with zero rows) to the longest one's whole rows, so a crash
between the files' writes never misaligns them. ``commit`` flushes the vector files before
committing tantivy, so a crash at any point
leaves committed documents pointing at vectors that exist; rows written after the last commit
are unreferenced and harmless ("dead" rows, like those of replaced or deleted documents).

Rebuilds and compaction write a complete new index beside the live one (``NAME.rebuild``)
while holding the live index's writer lock, then swap the directories (the live one becomes
``NAME.old`` for a moment); readers keep seeing the old index until the swap and notice the
new one (a new directory) on their next call. A process killed mid-job leaves its work
directory behind: readers never touch it (:meth:`EmbeddedBackend.leftovers` reports it), and
the next process that takes the writer lock removes it, saying so in one warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import tantivy

from qres.backends.base import (
    Backend,
    BackendError,
    Candidates,
    Hit,
    IndexFormatError,
    IndexMissingError,
)
from qres.corpus.readers import Question
from qres.text import bm25_terms

ANALYZERS = ("english", "plain")
_TERMS_ANALYZER = "qres_terms"  # whitespace split of the terms qres.text already produced
_WRITER_HEAP = 128 * 1024 * 1024  # per writer thread
_MAX_QUERY_TERMS = 1024  # a 10 kB query is still searched, by its first 1024 distinct terms
LOCK_FILE = "writer.lock"
_META_KEYS = ("analyzer", "title_boost", "vector_dtype")
# What an index directory may hold; a directory with anything else is never deleted or
# replaced by a rebuild (it is somebody's data, not an index).
_INDEX_ENTRIES = {"tantivy", "meta.json", "meta.json.tmp", "vectors.f16", "vectors.f32", LOCK_FILE}
_MORE_VECTORS = re.compile(r"vectors-[0-9a-f]{16}\.f(16|32)")  # further models' vector files
_COPY_BATCH = 1024  # documents per batch when compaction copies an index
_SCORE_ROWS = 16_384  # vector rows converted to float32 at a time for nearest()
# The on-disk layouts this code reads and writes. 1: title/body also indexed as one raw term;
# 2: one model; 3: several models (``more_models``), which an older qres must not open.
FORMAT = 2
FORMATS = (2, 3)


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, index_option="basic", tokenizer_name="raw")
    builder.add_bytes_field("title", stored=True)  # UTF-8, stored only
    builder.add_bytes_field("body", stored=True)
    builder.add_bytes_field("tags", stored=True)  # comma-separated
    builder.add_text_field("title_terms", index_option="freq", tokenizer_name=_TERMS_ANALYZER)
    builder.add_text_field("body_terms", index_option="freq", tokenizer_name=_TERMS_ANALYZER)
    builder.add_integer_field("slot", stored=True, fast=True)
    return builder.build()


def analyze(questions: Sequence[Question], analyzer: str | None) -> list[tuple[str, str]]:
    """The title and body terms of each question, space-joined as tantivy takes them."""
    return [
        (" ".join(bm25_terms(q.title, analyzer)), " ".join(bm25_terms(q.body, analyzer)))
        for q in questions
    ]


def _writer_size() -> tuple[int, int]:
    """(heap bytes, threads) of the tantivy writer: a thread per two cores up to 8, 128 MB
    of indexing memory each (tantivy splits the heap among its threads)."""
    threads = max(1, min(8, (os.cpu_count() or 1) // 2))
    return threads * _WRITER_HEAP, threads


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _identity(path: Path) -> tuple[int, int] | None:
    """Which directory ``path`` names now (a rebuild swaps in a new one); None if none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_replaceable(path: Path) -> None:
    """Refuse to delete or replace ``path`` unless it is missing, empty or a qres index."""
    if not path.exists():
        return
    if not path.is_dir():
        raise BackendError(f"{path} is a file, not a qres index directory")
    foreign = sorted(
        n for n in set(os.listdir(path)) - _INDEX_ENTRIES if not _MORE_VECTORS.fullmatch(n)
    )
    if foreign:
        shown = ", ".join(foreign[:3]) + (", …" if len(foreign) > 3 else "")
        raise BackendError(
            f"{path} is not a qres index (it holds {shown}): refusing to replace it; "
            "pick a new or empty directory with --index-dir"
        )


log = logging.getLogger(__name__)

WORK_DIRS = (".rebuild", ".old")  # what a rebuild or compaction writes beside NAME


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _complete_interrupted_swap(live: Path) -> None:
    """A crash between the two renames of a swap leaves NAME.old and a finished NAME.rebuild
    but no NAME: finish the swap."""
    old, staging = _sibling(live, ".old"), _sibling(live, ".rebuild")
    if live.exists() or not old.exists() or not (staging / "meta.json").exists():
        return
    with contextlib.suppress(OSError):  # read-only, or another process just finished it
        os.replace(staging, live)
        shutil.rmtree(old, ignore_errors=True)


def _read_meta(meta_path: Path) -> dict:
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BackendError(f"{meta_path}: unreadable index metadata ({err})") from None
    missing = [k for k in _META_KEYS if not isinstance(meta, dict) or k not in meta]
    if missing:
        raise BackendError(
            f"{meta_path}: not qres index metadata (no {', '.join(missing)}): "
            "rebuild the index with `qres index CORPUS --rebuild`"
        )
    if meta["vector_dtype"] not in ("float16", "float32"):
        raise BackendError(f"{meta_path}: unknown vector_dtype {meta['vector_dtype']!r}")
    if meta.get("format") not in FORMATS:
        raise IndexFormatError(
            f"{meta_path.parent} was written by another qres version (index format "
            f"{meta.get('format')}, this qres reads {' and '.join(map(str, FORMATS))}): "
            "re-index with `qres index CORPUS --rebuild`"
        )
    return meta


class EmbeddedBackend(Backend):
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
        # nearest()'s float32 copies of the vector files (rows are only ever appended, so a
        # copy grows by the new rows; dropped with the memory maps)
        self._float_vectors: dict[int, np.ndarray] = {}
        self._slot_of: dict[str, int] = {}
        self._reloading = threading.Lock()
        self._generation = 0
        _complete_interrupted_swap(self.live_path)
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
                self._init_dir(self.path, self._settings)
        self._meta = _read_meta(meta_path)
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
        identity = _identity(self.path)  # taken first: a swap while we open shows next call
        old_view, self._view = self._view, None
        index = self._open_tantivy(engine)
        index.register_tokenizer(
            _TERMS_ANALYZER, tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()
        )
        self.analyzer = "english" if self._meta["analyzer"] == "english" else None
        self.title_boost = float(self._meta["title_boost"])
        self._dtype = np.dtype(self._meta["vector_dtype"])
        self._vector_path = self.path / (
            "vectors.f16" if self._dtype == np.float16 else "vectors.f32"
        )
        self._generation += 1  # odd while the objects are being replaced (a seqlock)
        self._schema, self._index = index.schema, index
        self._vectors, self._slot_of = {}, {}
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

    @staticmethod
    def _init_dir(path: Path, settings: dict) -> None:
        analyzer = settings.get("analyzer", "english")
        if analyzer not in ANALYZERS:
            raise BackendError(f"unknown analyzer {analyzer!r} (one of {', '.join(ANALYZERS)})")
        dtype = settings.get("vector_dtype", "float16")
        if dtype not in ("float16", "float32"):
            raise BackendError(f"unknown vector_dtype {dtype!r} (float16 or float32)")
        check_replaceable(path)
        # tantivy first, meta.json last: meta.json is what makes a directory an index.
        shutil.rmtree(path / "tantivy", ignore_errors=True)
        (path / "tantivy").mkdir(parents=True)
        tantivy.Index(_schema(), path=str(path / "tantivy"), reuse=False)
        meta = {
            "format": FORMAT,
            "analyzer": analyzer,
            "title_boost": float(settings.get("title_boost", 2.0)),
            "vector_dtype": dtype,
        }
        meta.update(settings.get("meta", {}))
        _write_json(path / "meta.json", meta)

    def vector_models(self) -> list[str | None]:
        """The fingerprints of the models whose vectors the index holds, in file order (the
        first one's file is ``vectors.f16``; None: vectors of an unrecorded model)."""
        more = [m["model_fingerprint"] for m in self._meta.get("more_models", [])]
        first = self._meta.get("model_fingerprint")
        return [first, *more] if first or more or self._meta.get("vector_dim") else []

    def _vector_file(self, model: int) -> Path:
        if model == 0:
            return self._vector_path
        fingerprint = self._meta["more_models"][model - 1]["model_fingerprint"]
        return self.path / f"vectors-{fingerprint[:16]}{self._vector_path.suffix}"

    def _dim(self, model: int) -> int | None:
        if model == 0:
            return self._meta.get("vector_dim")
        return int(self._meta["more_models"][model - 1]["vector_dim"])

    def _model_number(self, fingerprint: str) -> int:
        models = self.vector_models()
        if fingerprint not in models:
            held = ", ".join(m[:12] for m in models if m) or "none"
            raise BackendError(
                f"this index holds no vectors of model {fingerprint[:12]} (it holds {held}): "
                "add it with `qres index CORPUS --model ... --model MODEL_DIR`"
            )
        return models.index(fingerprint)

    def _replaced(self) -> bool:
        """Whether a rebuild or compaction swapped a new directory in since we opened."""
        now = _identity(self.path)
        return now is not None and now != self._identity

    def _follow_swaps(self) -> None:
        if self._index is None:
            raise BackendError(f"the index at {self.live_path} is not open")
        if not self._rebuilding and self._lock is None and self._replaced():
            with self._reloading:  # one thread reopens; the others then see it done
                if self._replaced():
                    self._meta = _read_meta(self.path / "meta.json")
                    self._load_engine()

    # -- the writer's lock ---------------------------------------------------------------------

    def _take_lock(self) -> None:
        if self._lock is not None:
            return
        try:
            self.live_path.mkdir(parents=True, exist_ok=True)
            lock = open(self.live_path / LOCK_FILE, "a")  # noqa: SIM115 - held while writing
        except OSError as err:
            raise BackendError(f"{self.live_path} cannot be written ({err.strerror})") from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise BackendError(
                f"{self.live_path} is being written by another qres process: wait for it to end"
            ) from None
        self._lock = lock
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Delete what an interrupted rebuild or compaction left beside the index. Only the
        writer-lock holder calls this, so no running job's work directory is ever touched."""
        for found in self.leftovers():
            work = Path(found["path"])
            try:
                check_replaceable(work)  # never somebody's own directory that merely looks alike
            except BackendError as err:
                log.warning("left %s alone: %s", work, err)
                continue
            shutil.rmtree(work, ignore_errors=True)
            log.warning(
                "removed %s (%s), left behind by an interrupted rebuild or compaction",
                work,
                _size_text(found["bytes"]),
            )

    def leftovers(self) -> list[dict]:
        """Work directories of an interrupted rebuild or compaction beside the index (never
        this object's own rebuild), each ``{"path", "bytes", "removed_by"}``."""
        found = []
        for suffix in WORK_DIRS:
            work = _sibling(self.live_path, suffix)
            if work.is_dir() and not (self._rebuilding and work == self.path):
                found.append(
                    {"path": str(work), "bytes": _tree_bytes(work), "removed_by": REMOVED_BY}
                )
        return found

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def acquire_write_lock(self) -> None:
        """Become the index's one writer (or fail at once) and re-read what another writer
        may have changed before we got here."""
        if self._lock is not None:
            return
        self._take_lock()
        if self._replaced():
            self._meta = _read_meta(self.path / "meta.json")
            self._load_engine()
        else:
            self._meta = _read_meta(self.path / "meta.json")

    # -- rebuilding ----------------------------------------------------------------------------

    def begin_rebuild(self) -> None:
        """Send every write and read of this object to a fresh index built beside the live
        one (``NAME.rebuild``), holding the live index's writer lock; searches by other
        processes keep seeing the live index until :meth:`finish_rebuild` swaps it in."""
        self._begin_staging(self._settings)

    def _begin_staging(self, settings: dict) -> None:
        if self._rebuilding:
            raise BackendError(f"a rebuild of {self.live_path} is already under way")
        check_replaceable(self.live_path)
        staging = _sibling(self.live_path, ".rebuild")
        check_replaceable(staging)
        check_replaceable(_sibling(self.live_path, ".old"))
        if self._index is not None:
            self.acquire_write_lock()
        else:  # opened with rebuild=True: the old index is never read
            self._take_lock()
        self._close_files()
        shutil.rmtree(staging, ignore_errors=True)  # a crashed rebuild's leftovers
        self._init_dir(staging, settings)
        self.path, self._rebuilding = staging, True
        self._meta = _read_meta(staging / "meta.json")
        self._load_engine()

    def finish_rebuild(self) -> None:
        """Commit the new index and swap it in for the live one, which is deleted."""
        if not self._rebuilding:
            raise BackendError("no rebuild under way: start one with begin_rebuild()")
        self.commit()
        self._close_files()
        live, staging, old = self.live_path, self.path, _sibling(self.live_path, ".old")
        shutil.rmtree(old, ignore_errors=True)
        if live.exists():
            os.replace(live, old)
        os.replace(staging, live)  # a crash between the renames is finished by the next open
        _fsync_dir(live.parent)
        shutil.rmtree(old, ignore_errors=True)
        self._release_lock()
        self.path, self._rebuilding = live, False
        self._open(create=False)

    def abort_rebuild(self) -> None:
        """Delete the index being built; the live index stays as it was."""
        if not self._rebuilding:
            return
        self._close_files()
        shutil.rmtree(self.path, ignore_errors=True)
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
        return {k: meta[k] for k in _META_KEYS}

    def _model_meta(self) -> dict:
        return {k: v for k, v in self._meta.items() if k not in _META_KEYS}

    def _copy(self, docs: list[dict], source: dict, fingerprints: list, encode) -> int:
        def question(doc):
            return _question(doc["id"][0], doc)

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

    def _row_bytes(self, model: int = 0) -> int:
        return int(self._dim(model)) * self._dtype.itemsize

    def _append_vectors(self, vectors: list[np.ndarray]) -> int:
        """Write whole rows at the end of the vector files (one array per model, in file
        order) at the same slot; returns the first row's slot."""
        models = range(len(vectors))
        end = None  # known once every file is open: nothing is cut before that
        path = self._vector_path
        try:
            sizes = {}
            for m in models:
                path = self._vector_file(m)
                if m not in self._vector_fds:
                    self._vector_fds[m] = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                sizes[m] = os.fstat(self._vector_fds[m]).st_size
            # A torn row, left as is, would shift every row after it; a file shorter than
            # another (a crash between their writes) would misalign them: cut or pad every
            # file to the most whole rows any holds (rows past the last commit are dead).
            end = max(sizes[m] // self._row_bytes(m) for m in models)
            for m in models:
                path = self._vector_file(m)
                if sizes[m] != end * self._row_bytes(m):
                    os.ftruncate(self._vector_fds[m], end * self._row_bytes(m))
            for m in models:
                path = self._vector_file(m)
                data = memoryview(np.ascontiguousarray(vectors[m], dtype=self._dtype).tobytes())
                offset = end * self._row_bytes(m)
                while data:
                    written = os.pwrite(self._vector_fds[m], data, offset)
                    data, offset = data[written:], offset + written
        except OSError as err:
            for m, fd in self._vector_fds.items():
                if end is not None:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, end * self._row_bytes(m))
            raise BackendError(
                f"{path}: cannot write vectors ({err.strerror}); "
                "everything committed before this point is kept"
            ) from None
        return end

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
        for question, slot, (title_terms, body_terms) in zip(questions, slots, terms, strict=True):
            writer.delete_documents_by_term("id", question.id)
            writer.add_document(
                tantivy.Document(
                    id=question.id,
                    title=question.title.encode(),
                    body=question.body.encode(),
                    tags=",".join(question.tags).encode(),
                    title_terms=title_terms,
                    body_terms=body_terms,
                    slot=slot,
                )
            )

    def _rows_per_model(self, vectors) -> list[np.ndarray]:
        """``vectors`` (an array: the index's one model; or ``{fingerprint: array}``, one
        entry per model of the index) as one array per vector file."""
        models = self.vector_models() or [None]
        if isinstance(vectors, dict) and models == [None] and len(vectors) == 1:
            vectors = next(iter(vectors.values()))  # a model the index has not recorded
        if not isinstance(vectors, dict):
            if len(models) > 1:
                raise BackendError(
                    f"this index holds vectors of {len(models)} models: give each one's "
                    "(pass every --model the index was built with)"
                )
            return [np.asarray(vectors)]
        missing = [m for m in models if m not in vectors]
        if missing:
            raise BackendError(
                f"this index also holds vectors of model {(missing[0] or '?')[:12]}: pass its "
                "--model too (every model the index holds gets a vector per question)"
            )
        unknown = [fp for fp in vectors if fp not in models]
        if unknown:
            self._model_number(unknown[0])  # raises, naming it
        return [np.asarray(vectors[m]) for m in models]

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
        return {qid: _question(qid, doc) for qid, doc in self._docs(ids).items()}

    def _vector_rows(self, needed: int, model: int = 0) -> np.ndarray:
        store = self._vectors.get(model)
        if store is None or len(store) < needed:
            path = self._vector_file(model)
            size = path.stat().st_size if path.exists() else 0
            rows = size // self._row_bytes(model)
            dim = int(self._dim(model))
            store = (
                np.memmap(path, self._dtype, "r", shape=(rows, dim))
                if rows
                else np.zeros((0, dim), self._dtype)
            )
            self._vectors = {**self._vectors, model: store}  # replaced, never changed in place
        return store

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

    def vectors(
        self, ids: Sequence[str], model: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`Backend.vectors`; ``model``: the fingerprint of the model whose vectors
        to read, in an index of several (default: the first)."""
        return self._consistent(lambda: self._read_vectors(ids, model))

    def _read_vectors(self, ids: Sequence[str], model: str | None) -> tuple[np.ndarray, np.ndarray]:
        number = 0 if model is None else self._model_number(model)
        unknown = [q for q in ids if q not in self._slot_of]
        if unknown:
            docs = self._docs(unknown)
            self._slot_of.update({q: doc["slot"][0] for q, doc in docs.items()})
        return self._vectors_at([self._slot_of.get(q, -1) for q in ids], number)

    def _vectors_at(self, slots: Sequence[int], model: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``slots`` of a model's vector file (slot -1: none) and the mask of those
        present."""
        dim = self._dim(model)
        if dim is None:
            return np.zeros((len(slots), 0), np.float32), np.zeros(len(slots), bool)
        slots = np.asarray(slots, np.int64)
        store = self._vector_rows(int(slots.max(initial=-1)) + 1, model)
        have = (slots >= 0) & (slots < len(store))
        out = np.zeros((len(slots), dim), np.float32)
        out[have] = store[slots[have]]
        return out, have

    supports_nearest = True

    def nearest(self, query_vector: np.ndarray, k: int, model: str | None = None) -> list[Hit]:
        """Exact search: the cosine of every stored row (a float32 copy of the memory-mapped
        vectors, 4 bytes x dims per row), of which only the rows live documents point to
        are ranked."""
        return self._consistent(lambda: self._nearest(query_vector, k, model))

    def _nearest(self, query_vector, k: int, model: str | None) -> list[Hit]:
        number = 0 if model is None else self._model_number(model)
        if k <= 0 or self._dim(number) is None:
            return []
        searcher = self._index.searcher()
        with_vector = tantivy.Query.range_query(
            self._schema, "slot", tantivy.FieldType.Integer, lower_bound=0
        )
        live = searcher.search(with_vector, max(searcher.num_docs, 1), count=False).hits
        if not live:
            return []
        addresses = [address for _, address in live]
        slots = np.asarray(searcher.fast_field_values("slot", addresses), np.int64)
        store = self._float_rows(int(slots.max()) + 1, number)
        # einsum: numpy's own single-threaded loop, as fast here as BLAS's matrix-vector
        # product, which on a busy machine loses ~10 ms a query waiting for its threads
        cosine = np.einsum("ij,j->i", store, np.asarray(query_vector, np.float32))
        held = slots < len(store)
        slots, addresses = slots[held], [a for a, h in zip(addresses, held, strict=True) if h]
        scores = cosine[slots]
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.lexsort((slots[top], -scores[top]))]  # best first; ties: oldest row first
        return [Hit(searcher.doc(addresses[i])["id"][0], float(scores[i])) for i in top]

    def _float_rows(self, needed: int, model: int) -> np.ndarray:
        """The model's vector rows as float32 in memory (numpy converts float16 slowly, and
        every nearest() reads every row), extended by the rows appended since."""
        store = self._vector_rows(needed, model)
        done = self._float_vectors.get(model, np.zeros((0, store.shape[1]), np.float32))
        if len(done) < len(store):
            blocks = [done] + [
                np.asarray(store[start : start + _SCORE_ROWS], np.float32)
                for start in range(len(done), len(store), _SCORE_ROWS)
            ]
            done = np.concatenate(blocks)
            self._float_vectors = {**self._float_vectors, model: done}
        return done

    def count(self) -> int:
        self._follow_swaps()
        return self._index.searcher().num_docs

    def storage(self) -> dict:
        """Vector rows on disk, and how many of them no document uses any more."""
        self._follow_swaps()
        dim = self._meta.get("vector_dim")
        if dim is None:
            return {"vector_rows": 0, "dead_vector_rows": 0}
        size = self._vector_path.stat().st_size if self._vector_path.exists() else 0
        rows = size // self._row_bytes()
        with_vector = tantivy.Query.range_query(
            self._schema, "slot", tantivy.FieldType.Integer, lower_bound=0
        )
        used = self._index.searcher().search(with_vector, 1, count=True).count
        return {"vector_rows": rows, "dead_vector_rows": max(rows - used, 0)}

    def metadata(self) -> dict:
        self._follow_swaps()
        return dict(self._meta)

    def set_metadata(self, values: dict) -> None:
        self.acquire_write_lock()
        self._meta.update(values)
        _write_json(self.path / "meta.json", self._meta)

    def _close_files(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(ValueError):
                self._writer.rollback()
            self._writer = None
        for fd in self._vector_fds.values():
            os.close(fd)
        self._vector_fds = {}
        self._vectors = {}
        self._float_vectors = {}
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
        self.scores = np.array([score for score, _ in hits], dtype=np.float64)
        self.cosine = self.has_vector = self.cosines = None
        if query_vector is None:
            return
        queries = query_vector if isinstance(query_vector, dict) else {None: query_vector}
        models = {fp: 0 if fp is None else backend._model_number(fp) for fp in queries}
        slots = searcher.fast_field_values("slot", self._addresses) if hits else []
        slots = [-1 if s is None else s for s in slots]
        self.cosines, self.has_vector = {}, np.ones(len(slots), bool)
        for fp, vector in queries.items():
            vectors, has = backend._vectors_at(slots, models[fp])
            self.cosines[fp] = vectors @ vector  # both sides are L2-normalised
            self.has_vector &= has
        self.cosine = next(iter(self.cosines.values()))

    def ids(self, rows: Sequence[int]) -> list[str]:
        return [self._searcher.doc(self._addresses[i])["id"][0] for i in rows]


def _question(qid: str, doc: dict) -> Question:
    """A question from its stored fields (title, body and tags are UTF-8 bytes)."""
    tags = tuple(t for t in doc["tags"][0].decode().split(",") if t)
    return Question(qid, doc["title"][0].decode(), doc["body"][0].decode(), tags)


def _write_json(path: Path, value: dict) -> None:
    tmp = _sibling(path, ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(value, indent=2, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


REMOVED_BY = "the next write to the index (qres index, qres compact, a served write)"


def _size_text(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
