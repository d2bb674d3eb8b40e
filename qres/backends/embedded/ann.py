"""Approximate nearest-neighbour (ANN) files: a graph over a vector file's rows (usearch's
HNSW), so that nearest() reads a few hundred rows instead of every one.

One file per vector file, beside it: ``vectors.f16.ann`` for ``vectors.f16`` (and
``vectors-FP.f16.ann`` for a further model's). It holds

* a header: how many rows of the vector file it covers (``rows``: rows 0 … rows-1), how many
  of those were live (pointed to by a document) when it was written (``live``), and digests
  of a few covered rows, which tell that it belongs to the vector file beside it;
* the question id of every covered row ("" for a row no document pointed to then);
* the graph of the rows that were live, each keyed by its row number.

It stays right as the index changes, because rows are only appended to a vector file and a
row never comes back to life: rows written after the file (the tail) are scanned exactly and
merged in, and a covered row whose question was replaced or deleted since is told apart by
its id (the search in :mod:`~qres.backends.embedded.vectors`). A row keeps its question until
a rebuild or compaction renumbers the rows, and those write a new directory, so the ids hold
as long as the file does. The file is written whole beside its final name and renamed over
it, so a reader (or a crash) sees the old file or the new one; a file that does not match its
vector file is not used (nearest() scans exactly) and the writer's next commit replaces it.

Vectors go into the graph as int8 (usearch scales each to its own range for the cosine: the
same recall as rows scaled to ±127 at their largest component, measured), 1 byte per
dimension. The graph only picks candidates; nearest() ranks them by the stored vectors.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tantivy

from qres.backends.embedded.directory import file_stamp, fsync_dir, log, stamp_of
from qres.backends.embedded.documents import id_query
from qres.backends.embedded.vectors import as_float32, int8_shortlist, quantise_rows

SUFFIX = ".ann"
BUILD_THREADS: int | None = None  # threads adding rows to a graph (None: every core)
MAGIC = b"qres-ann"
# Below this many live rows no file is written: nearest() scans them all exactly. The graph
# is as fast as the scan at ~2,000 rows and 1.5x faster at 10,000 (benchmarks/nearest_latency
# .py, docs/scale.md); below 10,000 the scan costs a fraction of a millisecond and the small
# forums of the reproductions (travel, SemEval) keep their exact figures.
MIN_ROWS = 10_000
# The file is written again once this many live rows are not in it (update_nearest, at the
# end of a run of writes); a commit does it itself only once twice as many are, or half as
# many as the graph holds, so a long run of writes rewrites it a few times, not at each commit.
TAIL_ROWS = 10_000
# The search beam: candidates taken from the graph for a top k before the stored vectors rank
# them, EF up to EF_ROWS rows and EF_PER_TENFOLD more for every tenfold beyond (beam()).
EF, EF_ROWS, EF_PER_TENFOLD = 200, 100_000, 200
CONNECTIVITY = 16  # graph edges per row (HNSW's M)
EXPANSION_ADD = 64  # the beam while a row is added (128: 1.8x the build CPU, +0.7% recall)
# Vectors of DENSE_DIM dimensions or more (the transformers'; the shipped GRU's have 280) get
# twice the edges and usearch's own beam while adding: their neighbourhoods are denser. On
# 300,000 MiniLM int8 64 rows of grown real text, recall@100 at the default beam with real
# titles: 0.980 with 16 edges and a beam of 64, 0.993 with 32 and 128 (0.944 and 0.977 with
# the grown titles), for 2.4x the build CPU and a 23% larger file (docs/scale.md).
DENSE_DIM, DENSE_CONNECTIVITY, DENSE_EXPANSION_ADD = 384, 32, 128
_ADD_ROWS = 65_536  # rows converted to float32 and added at a time (bounded memory)
# Threads adding the rows of a near-empty graph at once can leave rows unreachable from its
# entry (330 demo rows, 2 threads, 20 builds: up to 33 rows a search never returned; none with
# one thread), so a new graph's first rows are added by one thread (~0.1 s).
_SERIAL_ROWS = 1_024
_CHECKED_ROWS = 4  # rows whose digests tie the file to its vector file


class AnnFileError(Exception):
    """The file cannot be used: unreadable, or not the graph of this vector file."""


def beam(rows: int, k: int) -> int:
    """The candidates to take from a graph of ``rows`` rows for a top ``k``: the recall@100
    against the exact scan was 0.980 with 200 at 41,803 real MiniLM vectors, and 0.942, 0.969
    and 0.981 with 200, 300 and 400 at a million GRU vectors (docs/scale.md)."""
    extra = EF_PER_TENFOLD * math.log10(rows / EF_ROWS) if rows > EF_ROWS else 0.0
    return min(max(k, EF + int(extra)), rows)  # never room for more than the graph holds


def path_for(vector_path: Path) -> Path:
    return vector_path.with_name(vector_path.name + SUFFIX)


def _checked(rows: int) -> list[int]:
    return sorted({0, rows // 3, (2 * rows) // 3, rows - 1}) if rows else []


def _digest(row: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(row).tobytes(), digest_size=8).hexdigest()


def _usearch_index():
    """usearch's Index class, onnxruntime imported first: onnxruntime imported after usearch
    crashes the process (usearch 2.26.6 carries its own C++ runtime; onnxruntime 1.32.0)."""
    import onnxruntime  # noqa: F401
    from usearch.index import Index

    return Index


def graph_settings(dim: int) -> tuple[int, int]:
    """(edges per row, beam while adding) of a new graph of ``dim``-dimensional vectors."""
    if dim >= DENSE_DIM:
        return DENSE_CONNECTIVITY, DENSE_EXPANSION_ADD
    return CONNECTIVITY, EXPANSION_ADD


def _new_graph(dim: int):
    edges, expansion_add = graph_settings(dim)
    return _usearch_index()(
        ndim=dim,
        metric="cos",
        dtype="i8",
        connectivity=edges,
        expansion_add=expansion_add,
        expansion_search=EF,
    )


class AnnFile:
    """An ANN file opened for search: memory-mapped, so the processes of a server share it."""

    def __init__(self, path: Path):
        """Open ``path``; raises :class:`AnnFileError` when it cannot be read (then
        :meth:`check` it against its vector file)."""
        Index = _usearch_index()  # noqa: N806 - a class
        self.path = path
        try:
            with open(path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self.stat = os.fstat(f.fileno())
        except (OSError, ValueError) as err:
            raise AnnFileError(f"{path}: cannot be read ({err})") from None
        view = memoryview(self._map)
        try:
            if bytes(view[: len(MAGIC)]) != MAGIC:
                raise ValueError("not an ANN file")
            size = int.from_bytes(view[len(MAGIC) : len(MAGIC) + 8], "little")
            start = len(MAGIC) + 8
            header = json.loads(bytes(view[start : start + size]))
            self.rows, self.live = int(header["rows"]), int(header["live"])
            self.removed, self._digests = int(header.get("removed", 0)), header["digests"]
            ids_at, graph_at = int(header["ids_at"]), int(header["graph_at"])
            self._offsets = np.frombuffer(view, np.int64, self.rows + 1, ids_at)
            # the same offsets as Python ints: a few ids read ~3x faster than through numpy
            self._offset_at = view[ids_at : ids_at + self._offsets.nbytes].cast("q")
            self._ids = view[ids_at + 8 * (self.rows + 1) : graph_at]
            self._graph = Index.restore(view[graph_at:], view=True)
            self._graph_at = graph_at
        except (ValueError, KeyError, TypeError, RuntimeError) as err:
            raise AnnFileError(f"{path}: unreadable ANN file ({err})") from None
        if self._graph is None:
            raise AnnFileError(f"{path}: unreadable ANN file (no graph)")
        self._graph.expansion_search = EF

    def check(self, vectors: np.ndarray) -> None:
        """Raise :class:`AnnFileError` unless this is the file of ``vectors`` (the vector
        file's memory map)."""
        if self._graph.ndim != vectors.shape[1]:
            raise AnnFileError(f"{self.path}: its graph does not have {vectors.shape[1]} dims")
        if len(vectors) < self.rows:
            raise AnnFileError(
                f"{self.path}: covers {self.rows} vector rows but the vector file holds "
                f"{len(vectors)}"
            )
        if any(_digest(vectors[r]) != self._digests.get(str(r)) for r in _checked(self.rows)):
            raise AnnFileError(f"{self.path}: made for other vectors than those beside it")

    def search(self, query: np.ndarray, count: int) -> np.ndarray:
        """The rows of up to ``count`` graph entries nearest to ``query``, best first."""
        query = np.asarray(query, np.float32)
        self._graph.expansion_search = max(EF, count)
        return self._graph.search(query, count, threads=1).keys.astype(np.int64)

    def id_at(self, row: int) -> str | None:
        """The question id row ``row`` held when the file was written (None: not covered,
        or no question's row then)."""
        return self.ids_at([row])[0]

    def ids_at(self, rows: Sequence[int] | np.ndarray) -> list[str | None]:
        """:meth:`id_at` of each of ``rows``."""
        offset, ids, covered = self._offset_at, self._ids, self.rows
        return [
            bytes(ids[offset[r] : offset[r + 1]]).decode() or None if 0 <= r < covered else None
            for r in (rows.tolist() if isinstance(rows, np.ndarray) else rows)
        ]

    def keys(self) -> np.ndarray:
        """The rows in the graph."""
        return np.asarray(self._graph.keys, np.int64)

    def graph_copy(self):
        """The graph loaded into memory, to add rows to (loading restores the edges it was
        made with, whatever :func:`graph_settings` says now)."""
        graph = _new_graph(self._graph.ndim)
        graph.load(memoryview(self._map)[self._graph_at :])
        return graph


def write(
    path: Path,
    vectors: np.ndarray,
    rows: int,
    new_ids: Sequence[str],
    add: np.ndarray,
    previous: AnnFile | None = None,
    remove: np.ndarray | None = None,
    threads: int | None = None,
) -> int:
    """Write the ANN file of vector rows ``0 … rows-1`` (``vectors``: the vector file's
    memory map): ``previous``'s graph less the rows ``remove``, plus the rows ``add`` (a
    fresh graph of ``add`` without ``previous``); ``new_ids``: the question id of each row
    ``previous`` does not cover ("" for none). Written beside ``path`` and renamed over it.
    Returns the rows in the graph (``live``)."""
    graph = previous.graph_copy() if previous is not None else _new_graph(vectors.shape[1])
    if remove is not None and len(remove):
        graph.remove(np.asarray(remove, np.uint64))
    threads = threads or BUILD_THREADS or os.cpu_count() or 1
    serial = min(len(add), max(0, _SERIAL_ROWS - len(graph)))  # a new graph's first rows
    for start, end, by in [(0, serial, 1)] + [
        (start, start + _ADD_ROWS, threads) for start in range(serial, len(add), _ADD_ROWS)
    ]:
        keys = np.asarray(add[start:end], np.int64)
        if len(keys):
            graph.add(keys.astype(np.uint64), as_float32(vectors[keys]), threads=by)
    live = len(graph)
    removed = (previous.removed if previous is not None else 0) + (
        len(remove) if remove is not None else 0
    )
    covered = previous.rows if previous is not None else 0
    if len(new_ids) != rows - covered:
        raise ValueError(f"{rows - covered} rows to name but {len(new_ids)} ids")
    blobs = [i.encode() for i in new_ids]
    old_offsets = previous._offsets if previous is not None else np.zeros(1, np.int64)
    offsets = np.empty(rows + 1, np.int64)
    offsets[: covered + 1] = old_offsets
    np.cumsum([len(b) for b in blobs], out=offsets[covered + 1 :])
    offsets[covered + 1 :] += old_offsets[-1]
    old_blob = previous._ids[: int(old_offsets[-1])] if previous is not None else b""
    graph_bytes, connectivity = graph.save(), int(graph.connectivity)
    del graph
    header = {
        "rows": rows,
        "live": live,
        "removed": removed,  # rows taken out of the graph since it was made
        "dim": int(vectors.shape[1]),
        "graph": {"library": "usearch", "dtype": "i8", "connectivity": connectivity},
        "digests": {str(r): _digest(vectors[r]) for r in _checked(rows)},
    }
    # the header's own length does not depend on the offsets written into it: fix their width
    header["ids_at"] = header["graph_at"] = 10**15
    width = len(json.dumps(header).encode())
    ids_at = _aligned(len(MAGIC) + 8 + width)
    graph_at = _aligned(ids_at + offsets.nbytes + int(offsets[-1]), 64)
    header["ids_at"], header["graph_at"] = ids_at, graph_at
    text = json.dumps(header).encode().ljust(width)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(MAGIC + len(text).to_bytes(8, "little") + text)
        f.write(b"\0" * (ids_at - f.tell()))
        f.write(offsets.tobytes())
        f.write(old_blob)
        f.write(b"".join(blobs))
        f.write(b"\0" * (graph_at - f.tell()))
        f.write(graph_bytes)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return live


def _aligned(offset: int, to: int = 8) -> int:
    return -(-offset // to) * to


class AnnFiles:
    """nearest() through the ANN files, and the writer keeping them up to date (mixed into
    :class:`~qres.backends.embedded.EmbeddedBackend`; the snapshot caches what it learns)."""

    def _ann_file(self, model: int, snapshot) -> AnnFile | None:
        """The model's ANN file as it is now (None: there is none, or it cannot be used)."""
        cached = snapshot.ann.get(model)
        path = cached[0] if cached is not None else path_for(self._vector_file(model))
        now = file_stamp(path)
        if cached is not None and cached[1] == now:
            return cached[2]
        found = None
        if now is not None:
            try:
                found = AnnFile(path)
                found.check(self._vector_rows(found.rows, model, snapshot, used=False))
                now = stamp_of(found.stat)
            except AnnFileError as err:
                found = None
                log.warning("%s: nearest() scans every row until the next write replaces it", err)
        snapshot.ann = {**snapshot.ann, model: (path, now, found)}
        return found

    def _nearest_ann(self, ann: AnnFile, query_vector, k: int, model: int, snapshot):
        """nearest() with the graph: its candidates still live, and the tail's best by an
        exact int8 scan, all ranked by the stored vectors; None: search exactly instead."""
        searcher = snapshot.index.searcher()
        tail = self._live_rows(snapshot, ann.rows, searcher)
        covered_live = searcher.num_docs - len(tail) - _without_vector(self._schema, searcher)
        query = np.asarray(query_vector, np.float32)
        wanted, count = min(k, covered_live), beam(ann.rows, k)
        found = np.zeros(0, np.int64)
        while wanted > 0:
            found = ann.search(query, count)
            if covered_live != ann.live:  # questions replaced or deleted since it was written
                found = self._still_live(searcher, found, ann)
            if len(found) >= wanted:
                break
            if count >= ann.live:
                return None  # the graph cannot give enough: not expected, but stay right
            count *= 4
        if len(tail):
            found = np.concatenate([found, self._tail_best(tail, query, k, model, snapshot)])
        if not len(found):
            return []

        def ids_of(rows: np.ndarray) -> list[str]:
            known = snapshot.id_at_slot  # the tail's rows
            return [i or known[r] for i, r in zip(ann.ids_at(rows), rows.tolist(), strict=True)]

        return self._ranked_rows(found, query, k, model, snapshot, ids_of)

    def _still_live(self, searcher, rows: np.ndarray, ann: AnnFile) -> np.ndarray:
        """``rows`` (covered by ``ann``) whose question still points to them, in order."""
        ids = [i or "" for i in ann.ids_at(rows)]
        query = id_query(self._schema, [i for i in ids if i])
        hits = searcher.search(query, max(len(ids), 1), count=False).hits
        live = set(searcher.fast_field_values("slot", [address for _, address in hits]))
        return rows[np.fromiter((int(r) in live for r in rows), bool, len(rows))]

    def _tail_best(self, tail: np.ndarray, query: np.ndarray, k: int, model: int, snapshot):
        """The tail rows an int8 scan ranks best, ``max(2k, k + 64)`` of them (as the exact
        nearest() shortlists every row)."""
        start = int(tail[0])
        store = self._vector_rows(int(tail[-1]) + 1, model, snapshot)
        first, rows, scales = snapshot.tail_scan.get(model, (start, None, None))
        if first != start or rows is None:
            first, rows, scales = start, np.zeros((0, store.shape[1]), np.uint8), np.zeros(0)
        if first + len(rows) < len(store):
            more, more_scales = quantise_rows(store[first + len(rows) :])
            rows = np.concatenate([rows, more])
            scales = np.concatenate([scales, more_scales]).astype(np.float32)
            snapshot.tail_scan = {**snapshot.tail_scan, model: (first, rows, scales)}
        return tail[int8_shortlist(rows, scales, tail - first, query, k)]

    def ann_status(self) -> list[str]:
        """How nearest() searches each model's vectors, in words (``qres info``)."""
        self._follow_swaps()
        if self._dim(0) is None:
            return []
        snapshot = self._snapshot
        out = []
        for model in range(max(len(self.vector_models()), 1)):
            name = self._vector_file(model).name
            found = self._ann_file(model, snapshot)
            if found is None:
                out.append(
                    f"{name}: no ANN file, every row scanned (one is written from "
                    f"{MIN_ROWS:,} questions on, at the next write)"
                )
            else:
                size = found.stat.st_size / 1e6
                out.append(
                    f"{name}: ANN file over its first {found.rows:,} rows ({found.live:,} in "
                    f"the graph, {size:,.1f} MB); rows written since are scanned"
                )
        return out

    # -- writing -------------------------------------------------------------------------------

    def update_nearest(self) -> None:
        """Bring the ANN files up to date with what was committed, at the end of a run of
        writes (``qres index``, a served batch of writes once it is acknowledged): write
        each from :data:`MIN_ROWS` live questions on, and again once :data:`TAIL_ROWS` live
        rows are not in it or that many rows in it died."""
        self._update_ann(settle=True)

    def _update_ann(self, settle: bool = False) -> None:
        """Write each model's ANN file, or write it again with the graph extended, once
        enough live rows are not in it or enough rows in it died: see :meth:`update_nearest`
        (``settle``); after a commit in the middle of a run of writes, twice those numbers
        or half the graph's rows, whichever is more. A failure (a full disk) leaves the file
        as it was: what was committed stays so."""
        if self._dim(0) is None or self._index is None:
            return
        try:
            self._write_ann_files(settle)
        except (OSError, RuntimeError, ValueError) as err:
            log.warning(
                "%s: the ANN files were not updated (%s): nearest() scans the rows they do "
                "not cover",
                self.path,
                getattr(err, "strerror", None) or err,
            )

    def _write_ann_files(self, settle: bool) -> None:
        snapshot = self._snapshot
        searcher = snapshot.index.searcher()
        for model in range(max(len(self.vector_models()), 1)):
            ann = self._ann_file(model, snapshot)
            start = ann.rows if ann is not None else 0
            tail = self._live_rows(snapshot, start, searcher)
            if ann is None:
                if len(tail) >= (MIN_ROWS if settle else 2 * MIN_ROWS):
                    self._write_ann(model, snapshot, tail)
                continue
            covered_live = searcher.num_docs - len(tail) - _without_vector(self._schema, searcher)
            dead = ann.live - covered_live
            limit = TAIL_ROWS if settle else max(2 * TAIL_ROWS, ann.live // 2)
            if len(tail) >= limit or dead >= limit:
                self._write_ann(model, snapshot, tail, ann, dead)

    def _write_ann(self, model: int, snapshot, tail: np.ndarray, ann=None, dead: int = 0):
        """Write the model's ANN file over every row committed so far: ``ann``'s graph less
        its rows that died (listed only when ``dead``) plus the live ``tail``; a fresh graph of
        every live row where there is no ``ann``, or a quarter of its graph would be rows
        taken out."""
        searcher = snapshot.index.searcher()
        needed = max(int(tail[-1]) + 1 if len(tail) else 0, ann.rows if ann is not None else 0)
        vectors = self._vector_rows(needed, model, snapshot)
        end = len(vectors)  # rows past the last live one are dead: covered all the same
        previous, add, remove = ann, tail, None
        if ann is not None and dead:
            live = self._live_below(searcher, ann.rows)
            remove = np.setdiff1d(ann.keys(), live)
            if ann.removed + len(remove) > (len(live) + len(tail)) // 4:
                previous, add, remove = None, np.concatenate([live, tail]), None
        start = previous.rows if previous is not None else 0
        known = snapshot.id_at_slot
        new_ids = [
            known.get(row) or (ann.id_at(row) if ann is not None else None) or ""
            for row in range(start, end)
        ]
        write(path_for(self._vector_file(model)), vectors, end, new_ids, add, previous, remove)

    def _live_below(self, searcher, end: int) -> np.ndarray:
        """The rows below ``end`` that live documents point to, ascending."""
        query = tantivy.Query.range_query(
            self._schema, "slot", tantivy.FieldType.Integer, lower_bound=0, upper_bound=end - 1
        )
        hits = searcher.search(query, max(searcher.num_docs, 1), count=False).hits
        found = searcher.fast_field_values("slot", [address for _, address in hits])
        return np.sort(np.asarray(found, np.int64))


def _without_vector(schema, searcher) -> int:
    """How many live documents have no vector (slot -1)."""
    query = tantivy.Query.range_query(schema, "slot", tantivy.FieldType.Integer, upper_bound=-1)
    return searcher.search(query, 1, count=True).count
