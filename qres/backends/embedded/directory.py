"""The index directory: what it holds, its metadata, its writer's lock and the leftovers of
interrupted jobs.

Layout of an index directory::

    tantivy/        the BM25 index (see :mod:`qres.backends.embedded.documents`)
    vectors.f16     (or .f32) row ``slot`` holds the vector of the document with that slot
    vectors-FP.f16  the same rows for each further model (FP: its fingerprint's first 16 hex
                    digits), written only in indexes of several models (format 3)
    vectors.f16.ann the approximate nearest-neighbour graph of a vector file's rows, once
                    the index is big enough (:mod:`qres.backends.embedded.ann`); optional
    meta.json       index metadata: format, analyzer, title boost, model fingerprint, vector dims
                    (``more_models``: the further models' fingerprints, dims and directories)
    writer.lock     held (flock) by the one process that may write the index

A rebuild or compaction works in ``NAME.rebuild`` beside the index (and ``NAME.old`` for a
moment during the swap). A process killed mid-job leaves that work directory behind: readers
never touch it (:meth:`WriterLock.leftovers` reports it), and the next process that takes the
writer lock removes it, saying so in one warning.

The swap (:func:`swap_in`) renames ``NAME`` to ``NAME.old``, then ``NAME.rebuild`` to
``NAME``. Once the first rename is done the only way is forward: ``NAME.rebuild`` is complete
(committed before), so whoever finds ``NAME`` missing beside ``NAME.old`` — the swapping
process's own cleanup, a reader, the next writer, the next open after a crash — finishes the
swap (:func:`complete_interrupted_swap`); nothing deletes ``NAME.old`` while ``NAME`` is
missing, and no writer creates an empty ``NAME`` in its place. Ctrl-C and SIGTERM are held
back across the two renames (:func:`qres.workers.signals_deferred`).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import logging
import math
import os
import re
import shutil
import weakref
from pathlib import Path

import tantivy

from qres.backends.base import BackendError, IndexBusy, IndexFormatError
from qres.backends.embedded.documents import ANALYZERS, schema
from qres.workers import signals_deferred

# The name the warnings have always been logged under (``qres serve`` shows it).
log = logging.getLogger("qres.backends.embedded")

LOCK_FILE = "writer.lock"
META_KEYS = ("analyzer", "title_boost", "vector_dtype")
# What an index directory may hold; a directory with anything else is never deleted or
# replaced by a rebuild (it is somebody's data, not an index).
_INDEX_ENTRIES = {"tantivy", "meta.json", "meta.json.tmp", "vectors.f16", "vectors.f32", LOCK_FILE}
# further models' vector files, and every vector file's ANN file (qres.backends.embedded.ann)
# with the one an interrupted write of it leaves
_MORE_VECTORS = re.compile(r"vectors(-[0-9a-f]{16})?\.f(16|32)(\.ann(\.tmp)?)?")
# The on-disk layouts this code reads and writes. 1: title/body also indexed as one raw term;
# 2: one model; 3: several models (``more_models``), which an older qres must not open.
# The stored ``extras`` field came later without a new format: an older qres ignores it, and
# an index without it opens and answers, with empty extras (documents.fields_of).
FORMAT = 2
FORMATS = (2, 3)
WORK_DIRS = (".rebuild", ".old")  # what a rebuild or compaction writes beside NAME
REMOVED_BY = "the next write to the index (qres index, qres compact, a served write)"


def sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def identity_of(path: Path) -> tuple[int, int] | None:
    """Which directory ``path`` names now (a rebuild swaps in a new one); None if none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells that the file at ``path`` was replaced or rewritten since: its inode,
    size and modification time (None: no such file)."""
    try:
        return stamp_of(os.stat(path))
    except OSError:
        return None


def stamp_of(st: os.stat_result) -> tuple[int, int, int]:
    """:func:`file_stamp` of a file already opened and stat'ed."""
    return st.st_ino, st.st_size, st.st_mtime_ns


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


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def complete_interrupted_swap(live: Path) -> None:
    """NAME missing beside NAME.old: a swap stopped (or is now) between its two renames.
    Finish it: NAME.rebuild, complete before the first rename, becomes NAME. Without one (an
    older qres deleted it), NAME.old, the only copy left, is put back."""
    old, staging = sibling(live, ".old"), sibling(live, ".rebuild")
    if live.exists() or not old.is_dir():
        return
    # Each rename is atomic and never replaces a non-empty directory, so when the swapping
    # process (or another reader) gets there first, ours fails and changes nothing.
    with contextlib.suppress(OSError):  # read-only, or another process just finished it
        if (staging / "meta.json").exists():
            os.replace(staging, live)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(old, live)
            log.warning("put %s back from %s, left by an interrupted swap", live, old)


def swap_in(live: Path, staging: Path) -> None:
    """Make the complete index ``staging`` (NAME.rebuild) the index at ``live`` (NAME): NAME
    becomes NAME.old, NAME.rebuild becomes NAME, NAME.old is deleted. A reader that opens
    between the renames finishes the swap itself (:func:`complete_interrupted_swap`), which
    is no failure."""
    old = sibling(live, ".old")
    shutil.rmtree(old, ignore_errors=True)  # NAME is there (this process holds its lock)
    new = identity_of(staging)
    with signals_deferred():
        if live.exists():
            os.replace(live, old)
        try:
            os.replace(staging, live)
        except FileNotFoundError:
            if new is None or identity_of(live) != new:  # not finished by another process
                raise
        fsync_dir(live.parent)
    shutil.rmtree(old, ignore_errors=True)


def read_meta(meta_path: Path) -> dict:
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BackendError(f"{meta_path}: unreadable index metadata ({err})") from None
    missing = [k for k in META_KEYS if not isinstance(meta, dict) or k not in meta]
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


def check_settings(settings: dict) -> None:
    """Refuse settings a new index cannot be made with, in one line each."""
    analyzer = settings.get("analyzer", "english")
    if analyzer not in ANALYZERS:
        raise BackendError(f"unknown analyzer {analyzer!r} (one of {', '.join(ANALYZERS)})")
    dtype = settings.get("vector_dtype", "float16")
    if dtype not in ("float16", "float32"):
        raise BackendError(f"unknown vector_dtype {dtype!r} (float16 or float32)")
    boost = settings.get("title_boost", 2.0)
    try:
        finite = math.isfinite(float(boost)) and float(boost) >= 0
    except (TypeError, ValueError):
        finite = False
    if not finite:
        raise BackendError(f"title_boost must be a number of at least 0, got {boost!r}")


def init_dir(path: Path, settings: dict) -> None:
    """Make ``path`` an empty index (``settings``, as :func:`check_settings` passed them:
    analyzer, title_boost, vector_dtype, and ``meta``, further metadata to record)."""
    analyzer = settings.get("analyzer", "english")
    dtype = settings.get("vector_dtype", "float16")
    check_replaceable(path)
    # tantivy first, meta.json last: meta.json is what makes a directory an index.
    shutil.rmtree(path / "tantivy", ignore_errors=True)
    (path / "tantivy").mkdir(parents=True)
    tantivy.Index(schema(), path=str(path / "tantivy"), reuse=False)
    meta = {
        "format": FORMAT,
        "analyzer": analyzer,
        "title_boost": float(settings.get("title_boost", 2.0)),
        "vector_dtype": dtype,
    }
    meta.update(settings.get("meta", {}))
    write_json(path / "meta.json", meta)


def write_json(path: Path, value: dict) -> None:
    tmp = sibling(path, ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(value, indent=2, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _size_text(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


# The writer locks this process holds, by index path (gone when their file is closed).
_LOCKED_HERE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def lock_dir(path: Path):
    """The open ``writer.lock`` of the index at ``path``, held (flock) until closed; refused
    while another process holds it. ``path`` is created if missing, but never while
    ``NAME.old`` is beside it: that is a swap to finish first, or the index is lost."""
    old = sibling(path, ".old")
    for _ in range(3):
        try:
            try:
                lock = open(path / LOCK_FILE, "a")  # noqa: SIM115 - held while writing
                break
            except FileNotFoundError:
                if old.exists():
                    complete_interrupted_swap(path)
                else:
                    path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise BackendError(f"{path} cannot be written ({err.strerror})") from None
    else:
        raise BackendError(
            f"{path} is missing and {old} is beside it (an interrupted swap) that this "
            f"process cannot finish: rename {sibling(path, '.rebuild')} (or, without one, "
            f"{old}) to {path}"
        )
    key = str(path.resolve())
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        # An index this process opened and dropped (an Index whose add() failed, kept only
        # by the exception's traceback) holds the lock until collected: collect, try again.
        gc.collect()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            mine = _LOCKED_HERE.get(key)
            here = mine is not None and not mine.closed
            if here:
                raise BackendError(
                    f"{path} is open for writing elsewhere in this process: close that Index or "
                    "backend first (or open it in a with block)"
                ) from None
            raise IndexBusy(
                f"{path} is being written by another qres process (qres index, compact, "
                "or a qres serve that takes writes): wait for it to end, or stop that server"
            ) from None
    _LOCKED_HERE[key] = lock
    return lock


class WriterLock:
    """The writer's lock of :class:`~qres.backends.embedded.EmbeddedBackend` (mixed into it):
    one process at a time writes an index, and that process clears the leftovers of
    interrupted jobs first."""

    def _take_lock(self) -> None:
        if self._lock is not None:
            return
        self._lock = lock_dir(self.live_path)
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Delete what an interrupted rebuild or compaction left beside the index. Only the
        writer-lock holder calls this, so no running job's work directory is ever touched."""
        whole = (self.live_path / "meta.json").exists()
        for found in self.leftovers():
            work = Path(found["path"])
            if work.name.endswith(".old") and not whole:
                log.warning("left %s alone: %s holds no index", work, self.live_path)
                continue
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
            work = sibling(self.live_path, suffix)
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
            self._meta = read_meta(self.path / "meta.json")
            self._load_engine()
        else:
            self._meta = read_meta(self.path / "meta.json")
            self._snapshot.follow_commits()  # (no swap can come: the lock holds them off)
