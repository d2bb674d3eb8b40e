"""The query path: BM25 candidates → query vector → cosine rescoring → fusion.

Modes:

* ``bm25`` — the first stage alone;
* ``dense`` — the BM25 top-K re-ordered by cosine similarity to the query vector;
* ``hybrid`` — the BM25 top-K re-ordered by the fused score (:mod:`qres.fusion`).

A candidate without a stored vector cannot be rescored: in dense and hybrid modes such
candidates follow the rescored ones, in their BM25 order, and are flagged in the result.
``qres search``, ``qres evaluate`` and the benchmarks all go through :class:`SearchPipeline`;
:meth:`SearchPipeline.open` is what ``qres search`` does: the index's own model (the one it
was indexed with) and that model's fusion weights.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qres.backends.base import Backend, BackendError
from qres.fusion import DEFAULT, Fusion, normalize_bm25

MODES = ("bm25", "dense", "hybrid")
DEFAULT_CANDIDATES = 100


@dataclass(frozen=True)
class Result:
    id: str
    score: float
    bm25: float
    cosine: float | None  # None: no vector for this candidate (or bm25 mode)


def check_model_matches(backend: Backend, encoder) -> None:
    """Fail clearly when the index's vectors were not made by ``encoder``."""
    meta = backend.metadata()
    fingerprint = meta.get("model_fingerprint")
    if fingerprint is None:
        raise BackendError(
            "this index has no vectors: index with `qres index CORPUS --model MODEL_DIR` "
            "to use dense or hybrid search"
        )
    if fingerprint != encoder.fingerprint or meta.get("vector_dim") != encoder.dim:
        raise BackendError(
            f"the index was built with model {fingerprint[:12]} ({meta.get('vector_dim')} dims) "
            f"but the model given is {encoder.fingerprint[:12]} ({encoder.dim} dims): "
            "re-index with `qres index CORPUS --model MODEL_DIR --rebuild`"
        )


class SearchPipeline:
    """BM25 candidates from ``backend``, rescored with ``encoder`` and fused by ``fusion``.

    ``mode`` is the default of :meth:`search`: hybrid with an encoder, else bm25.
    """

    def __init__(
        self,
        backend: Backend,
        encoder=None,
        fusion: Fusion = DEFAULT,
        candidates: int = DEFAULT_CANDIDATES,
        mode: str | None = None,
    ):
        self.backend, self.encoder, self.fusion, self.candidates = (
            backend,
            encoder,
            fusion,
            candidates,
        )
        self.mode = mode or ("hybrid" if encoder is not None else "bm25")
        self._owns_backend = False
        if encoder is not None:
            check_model_matches(backend, encoder)

    @classmethod
    def open(
        cls,
        index_dir: str | Path | None = None,
        model: str | Path | None = None,
        *,
        mode: str | None = None,
        backend: str | None = None,
        candidates: int = DEFAULT_CANDIDATES,
        **settings,
    ) -> SearchPipeline:
        """The pipeline ``qres search`` runs over the index at ``index_dir`` (default
        ``$QRES_HOME/index``; ``backend``/``settings`` as for
        :func:`qres.backends.open_backend`). Close it, or use it in a ``with`` block."""
        from qres import paths
        from qres.backends import open_backend

        store = open_backend(backend, index_dir or paths.default_index_dir(), **settings)
        try:
            pipeline = cls.for_index(store, model, mode, candidates)
        except BaseException:
            store.close()
            raise
        pipeline._owns_backend = True
        return pipeline

    @classmethod
    def for_index(
        cls,
        backend: Backend,
        model: str | Path | None = None,
        mode: str | None = None,
        candidates: int = DEFAULT_CANDIDATES,
        threads: int | None = None,
        device: str | None = None,
    ) -> SearchPipeline:
        """A pipeline over an open ``backend``: ``model`` or, unless ``mode`` is bm25, the
        model the index was built with, and the fusion weights saved with that model
        (``threads``: onnxruntime threads per encoding, see :meth:`Encoder.from_model`;
        ``device`` as for :meth:`qres.encoder.Runtime.from_env`)."""
        meta = backend.metadata()
        if mode == "bm25":  # BM25 needs no model: whatever ``model`` names is not loaded
            model = None
        if model is None and mode != "bm25" and meta.get("model_dir"):
            model = Path(meta["model_dir"])
        if model is None:
            if mode in ("dense", "hybrid"):
                raise BackendError(f"--mode {mode} needs vectors: index with --model MODEL_DIR")
            return cls(backend, candidates=candidates, mode="bm25")
        from qres.encoder import Encoder, Runtime
        from qres.model import open_model

        loaded = open_model(model)
        loaded.require_search_scorer()
        runtime = Runtime.from_env(device)
        encoder = Encoder.from_model(loaded, threads=threads, runtime=runtime)
        return cls(backend, encoder, Fusion.for_model(loaded), candidates, mode or "hybrid")

    def close(self) -> None:
        """Close the backend if :meth:`open` opened it."""
        if self._owns_backend:
            self.backend.close()

    def __enter__(self) -> SearchPipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def search(
        self,
        text: str,
        k: int = 10,
        mode: str | None = None,
        only_ids: Sequence[str] | None = None,
        query_vector: np.ndarray | None = None,
    ) -> list[Result]:
        """Top ``k`` for ``text`` in ``mode`` (default :attr:`mode`); ``query_vector``
        replaces encoding ``text`` (evaluation encodes a whole question, title and body)."""
        mode = mode or self.mode
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
        if k < 1:
            raise ValueError(f"k must be at least 1, not {k}")
        if mode == "bm25":
            window = k  # nothing is rescored: the engine's own top k
        else:
            window = max(k, self.candidates) if only_ids is None else len(only_ids)
        if mode == "bm25" or self.encoder is None:
            found = self.backend.candidates(text, window, only_ids=only_ids)
            if mode == "bm25" or not len(found):
                top = range(min(k, len(found)))
                scores = [float(found.scores[i]) for i in top]
                ids = found.ids(top)
                return [Result(qid, s, s, None) for qid, s in zip(ids, scores, strict=True)]
            raise BackendError(f"{mode} search needs a model: pass --model MODEL_DIR")
        if query_vector is None:
            query_vector = self.encoder.encode_query(text)
        found = self.backend.candidates(text, window, only_ids, query_vector)
        if not len(found):
            return []
        bm25 = found.scores.astype(np.float32)
        cosine, has_vector = found.cosine, found.has_vector
        score = cosine if mode == "dense" else self.fusion.score(bm25, cosine)
        # Rescored candidates first by score; the ones without a vector after them, BM25 order
        # (lexsort is stable: equal scores keep their BM25 order too).
        position = np.arange(len(found))
        order = np.lexsort((np.where(has_vector, -score, position), ~has_vector))[:k]
        fallback = normalize_bm25(bm25)
        return [
            Result(
                qid,
                float(score[i]) if has_vector[i] else float(fallback[i]),
                float(bm25[i]),
                float(cosine[i]) if has_vector[i] else None,
            )
            for qid, i in zip(found.ids(order), order, strict=True)
        ]


def search_log_record(
    text: str, mode: str, k: int, latency_ms: float, results: Sequence[Result], backend: Backend
) -> dict:
    """One search as the search log (``--log-queries``, Kibana's dashboard) records it."""
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "query": text,
        "mode": mode,
        "k": k,
        "latency_ms": round(latency_ms, 3),
        "top_ids": [r.id for r in results],
        "top_scores": [r.score for r in results],
        "result_count": len(results),
        "backend": backend.name,
    }
