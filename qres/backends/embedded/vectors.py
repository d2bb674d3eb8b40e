"""The memory-mapped vector files: appending rows, reading them, and nearest search.

Vectors are only ever appended, whole rows at a time: an upsert writes its rows at the end of
the vector file and records the new slot in the document. A torn last row (a crash or a full
disk in the middle of a write) is cut off before the next append, so it can never shift later
rows. With several models every vector file gets its row at the same slot; before an append
the files are cut (or padded with zero rows) to the longest one's whole rows, so a crash
between the files' writes never misaligns them. ``commit`` flushes the vector files before
committing tantivy, so a crash at any point
leaves committed documents pointing at vectors that exist; rows written after the last commit
are unreferenced and harmless ("dead" rows, like those of replaced or deleted documents).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tantivy

from qres.backends.base import BackendError, Hit
from qres.backends.embedded.snapshot import Snapshot

_SCORE_ROWS = 16_384  # vector rows quantised at a time for nearest()
# nearest() keeps max(2k, k + 64) rows by the int8 scan, then ranks those by the stored vectors
_SHORTLIST, _SHORTLIST_MIN_EXTRA = 2, 64
_INT8_DOT = Path(__file__).with_name("int8_dot.onnx")  # one MatMulInteger: uint8 rows x int8
_HALF_TO_FLOAT = Path(__file__).with_name("half_to_float.onnx")  # one Cast: float16 to float32
# below this many values numpy converts float16 rows itself: the session call costs more
_CAST_MIN_VALUES = 4_096


def _session(path: Path):
    """An onnxruntime session of ``path``, one thread (searches run side by side in a
    server's workers and threads; a second thread per search only waits on them)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@functools.cache
def int8_dot():
    return _session(_INT8_DOT)


@functools.cache
def half_to_float():
    return _session(_HALF_TO_FLOAT)


def as_float32(rows: np.ndarray) -> np.ndarray:
    """``rows`` as float32. float16 rows (what vector files hold) go through onnxruntime's
    Cast, ~6x faster than numpy's astype, which converts them one value at a time; the
    conversion is exact either way, so the scores computed from them do not change."""
    if rows.dtype != np.float16 or rows.size < _CAST_MIN_VALUES:
        return np.asarray(rows, np.float32)
    return half_to_float().run(None, {"rows": np.ascontiguousarray(rows)})[0]


def quantise_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows as uint8 (each scaled by its largest absolute value to ±127, then shifted by 128)
    and each row's scale: row ≈ (uint8 - 128) × scale."""
    rows = as_float32(rows)
    scales = np.abs(rows).max(axis=1) / 127.0
    scales[scales == 0] = 1.0
    shifted = np.rint(rows / scales[:, None]) + 128.0
    return shifted.astype(np.uint8), scales.astype(np.float32)


def int8_shortlist(rows, scales, at, query, k: int) -> np.ndarray:
    """Positions in ``at`` of the rows (of ``rows`` and ``scales``, :func:`quantise_rows`)
    that an int8 scan ranks best against ``query``: ``max(2k, k + 64)`` of them, or all.
    onnxruntime's MatMulInteger over uint8 rows: ~5x numpy's float32 loop, and 1/4 of its
    memory (the scan reads every row and is bound by memory bandwidth)."""
    query_int8, _ = quantise_rows(query[None])
    query_int8 = (query_int8.astype(np.int16) - 128).astype(np.int8).reshape(-1, 1)
    dots = int8_dot().run(None, {"rows": rows, "query": query_int8})[0][:, 0]
    approx = (dots[at] - 128 * int(query_int8.sum())) * scales[at]
    shortlist = min(max(_SHORTLIST * k, k + _SHORTLIST_MIN_EXTRA), len(at))
    if shortlist < len(at):
        return np.argpartition(-approx, shortlist - 1)[:shortlist]
    return np.arange(len(at))


def damaged(path: Path, rows: int, needed: int) -> BackendError:
    return BackendError(
        f"{path}: the vector file is damaged (it ends at row {rows:,}; the index's questions "
        f"use rows up to {needed:,}): re-index with `qres index CORPUS --rebuild` and a model"
    )


class VectorFiles:
    """The vector files of :class:`~qres.backends.embedded.EmbeddedBackend` (mixed into it):
    one per model, row ``slot`` of each holding the vector of the document with that slot."""

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
                    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                    try:  # rows appended after a cut would land on rows questions use
                        self._check_rows(path, os.fstat(fd).st_size // self._row_bytes(m))
                    except BackendError:
                        os.close(fd)
                        raise
                    self._vector_fds[m] = fd
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
                f"{self.live_path / path.name}: cannot write vectors ({err.strerror}); "
                f"{self.kept_on_failure()}"
            ) from None
        return end

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

    def _vector_rows(
        self, needed: int, model: int = 0, snapshot: Snapshot | None = None, used: bool = True
    ) -> np.ndarray:
        """The model's vector file as an array, read again if it holds fewer than ``needed``
        rows; ``used``: questions point at those rows (fewer on disk: the file is damaged)."""
        snapshot = snapshot or self._snapshot
        store = snapshot.vectors.get(model)
        if store is None or len(store) < needed:
            path = self._vector_file(model)
            if needed and not path.exists():  # documents point at its rows: a swap, or damage
                raise BackendError(f"{path} is missing: re-index with `qres index --rebuild`")
            size = path.stat().st_size if path.exists() else 0
            rows = size // self._row_bytes(model)
            if used and rows < needed:  # rows questions point at are gone (a swap retries)
                raise damaged(path, rows, needed)
            dim = int(self._dim(model))
            store = (  # a plain array over the map: numpy's memmap class slows every read
                np.memmap(path, self._dtype, "r", shape=(rows, dim)).view(np.ndarray)
                if rows
                else np.zeros((0, dim), self._dtype)
            )
            snapshot.vectors = {**snapshot.vectors, model: store}  # replaced, never changed
        return store

    def vectors(
        self, ids: Sequence[str], model: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`Backend.vectors`; ``model``: the fingerprint of the model whose vectors
        to read, in an index of several (default: the first)."""
        return self._consistent(lambda: self._read_vectors(ids, model))

    def _read_vectors(self, ids: Sequence[str], model: str | None) -> tuple[np.ndarray, np.ndarray]:
        number = 0 if model is None else self._model_number(model)
        snapshot = self._snapshot
        slot_of = snapshot.slot_of  # taken before the documents: a commit replaces it
        unknown = [q for q in ids if q not in slot_of]
        if unknown:
            docs = self._docs(unknown, snapshot)
            slot_of.update({q: doc["slot"][0] for q, doc in docs.items()})
        return self._vectors_at([slot_of.get(q, -1) for q in ids], number, snapshot)

    def _vectors_at(
        self, slots: Sequence[int], model: int = 0, snapshot: Snapshot | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``slots`` of a model's vector file (slot -1: none) and the mask of those
        present."""
        dim = self._dim(model)
        if dim is None:
            return np.zeros((len(slots), 0), np.float32), np.zeros(len(slots), bool)
        slots = np.asarray(slots, np.int64)
        store = self._vector_rows(int(slots.max(initial=-1)) + 1, model, snapshot)
        have = (slots >= 0) & (slots < len(store))
        if have.all():
            return as_float32(store[slots]), have
        out = np.zeros((len(slots), dim), np.float32)
        out[have] = as_float32(store[slots[have]])
        return out, have

    supports_nearest = True

    def nearest(self, query_vector: np.ndarray, k: int, model: str | None = None) -> list[Hit]:
        """The ``k`` live rows nearest to the query by cosine. Where the vector file has an
        ANN file (:mod:`~qres.backends.embedded.ann`: an index of at least ``ann.MIN_ROWS``
        questions), its graph gives the candidates of the rows it covers and an exact scan
        those of the rows written since; else (:meth:`nearest_exact`) an int8 scan of every
        stored row (an in-memory copy quantised per row, 1 byte x dims per row) picks the
        best ``max(2k, k + 64)``. Either way the candidates are ranked by the cosine of their
        stored vectors, and only rows live documents point to are ranked. A row the scan
        misplaces by more than k places is missed; its error is at most ~1/127 of the largest
        component per term."""
        return self._consistent(lambda: self._nearest(query_vector, k, model))

    def nearest_exact(self, query_vector, k: int, model: str | None = None) -> list[Hit]:
        """:meth:`nearest` by a scan of every row, whether or not there is an ANN file."""
        return self._consistent(lambda: self._nearest(query_vector, k, model, exact=True))

    def _nearest(self, query_vector, k: int, model: str | None, exact: bool = False) -> list[Hit]:
        number = 0 if model is None else self._model_number(model)
        if k <= 0 or self._dim(number) is None:
            return []
        snapshot = self._snapshot  # one generation's slots, ids and rows throughout
        ann = None if exact else self._ann_file(number, snapshot)
        if ann is not None:
            hits = self._nearest_ann(ann, query_vector, k, number, snapshot)
            if hits is not None:
                return hits
        slots = self._live_rows(snapshot)
        if not len(slots):
            return []
        rows, scales = self._scan_rows(int(slots[-1]) + 1, number, snapshot)
        slots = slots[slots < len(rows)]
        query = np.asarray(query_vector, np.float32)
        slots = slots[int8_shortlist(rows, scales, slots, query, k)]
        known = snapshot.id_at_slot

        def ids_of(rows: np.ndarray) -> list[str]:
            return [known[r] for r in rows.tolist()]

        return self._ranked_rows(slots, query, k, number, snapshot, ids_of)

    def _ranked_rows(self, rows, query, k: int, model: int, snapshot, ids_of) -> list[Hit]:
        """The best ``k`` of ``rows`` by the cosine of their stored vectors, as hits named by
        ``ids_of(rows)``."""
        vectors, _ = self._vectors_at(rows, model, snapshot)
        scores = vectors @ query
        top = np.lexsort((rows, -scores))[:k]  # best first; ties: oldest row first
        ids = ids_of(np.asarray(rows)[top])
        return [Hit(qid, score) for qid, score in zip(ids, scores[top].tolist(), strict=True)]

    def _live_rows(self, snapshot: Snapshot, start: int = 0, searcher=None) -> np.ndarray:
        """The rows from ``start`` on that live documents point to, ascending, with their ids
        in ``snapshot.id_at_slot``, listed again only when they changed (kept for every row,
        and for the rows an ANN file does not cover: ``start`` > 0).

        Listing them takes ~25 ms at 100,000 questions; the count, sum and maximum of the
        live slots, which tantivy aggregates in ~0.3 ms, tell whether they changed: rows are
        only appended, so any new or replaced vector raises the maximum and any deletion
        lowers the count. A row keeps its question until a rebuild or compaction renumbers
        the rows, and those reopen the index, which replaces the snapshot holding this cache,
        so the ids of rows already seen are never read again."""
        searcher = searcher or snapshot.index.searcher()
        with_vector = self._with_vector(start)
        stats = self._slot_stats(searcher, with_vector)
        state = (start, stats["count"], stats["sum"], stats["max"])
        kept = "live_slots" if start == 0 else "tail_slots"
        cached = getattr(snapshot, kept)
        if cached is not None and cached[0] == state:
            return cached[1]
        if not stats["count"]:
            slots = np.zeros(0, np.int64)
        else:
            hits = searcher.search(with_vector, int(stats["count"]), count=False).hits
            addresses = [address for _, address in hits]
            found = searcher.fast_field_values("slot", addresses)
            for slot, address in zip(found, addresses, strict=True):
                if slot not in snapshot.id_at_slot:
                    snapshot.id_at_slot[slot] = searcher.doc(address)["id"][0]
            slots = np.sort(np.asarray(found, np.int64))
        setattr(snapshot, kept, (state, slots))
        return slots

    def _scan_rows(
        self, needed: int, model: int, snapshot: Snapshot
    ) -> tuple[np.ndarray, np.ndarray]:
        """The model's vector rows quantised for nearest() (:func:`quantise_rows`) in memory,
        extended by the rows appended since."""
        store = self._vector_rows(needed, model, snapshot)
        rows, scales = snapshot.scan_vectors.get(
            model, (np.zeros((0, store.shape[1]), np.uint8), np.zeros(0, np.float32))
        )
        if len(rows) < len(store):
            blocks = [
                quantise_rows(store[start : start + _SCORE_ROWS])
                for start in range(len(rows), len(store), _SCORE_ROWS)
            ]
            rows = np.concatenate([rows] + [b[0] for b in blocks])
            scales = np.concatenate([scales] + [b[1] for b in blocks])
            snapshot.scan_vectors = {**snapshot.scan_vectors, model: (rows, scales)}
        return rows, scales

    def storage(self) -> dict:
        """Vector rows on disk, and how many of them no document uses any more."""
        self._follow_swaps()
        dim = self._meta.get("vector_dim")
        if dim is None:
            return {"vector_rows": 0, "dead_vector_rows": 0}
        size = self._vector_path.stat().st_size if self._vector_path.exists() else 0
        rows = size // self._row_bytes()
        used = self._check_rows(self._vector_path, rows)
        return {"vector_rows": rows, "dead_vector_rows": max(rows - used, 0)}

    def _with_vector(self, start: int = 0) -> tantivy.Query:
        """The documents whose vectors are at rows ``start`` and after."""
        return tantivy.Query.range_query(
            self._schema, "slot", tantivy.FieldType.Integer, lower_bound=start
        )

    def _slot_stats(self, searcher, with_vector: tantivy.Query) -> dict:
        """The count, sum and maximum of the rows ``with_vector``'s documents point to."""
        return searcher.aggregate(with_vector, {"slots": {"stats": {"field": "slot"}}})["slots"]

    def _check_rows(self, path: Path, rows: int) -> int:
        """Refuse a vector file of ``rows`` rows that ends before a row a question uses;
        returns how many questions use rows."""
        stats = self._slot_stats(self._index.searcher(), self._with_vector())
        used = int(stats["count"])
        needed = int(stats["max"]) + 1 if used else 0
        if rows < needed:
            raise damaged(path, rows, needed)
        return used
