"""The query path: BM25 candidates → query vector → cosine rescoring → fusion.

Modes:

* ``bm25`` — the first stage alone;
* ``dense`` — the BM25 top-K re-ordered by cosine similarity to the query vector;
* ``hybrid`` — the BM25 top-K re-ordered by the fused score (:mod:`qres.fusion`).

A candidate without a stored vector cannot be rescored: in dense and hybrid modes such
candidates follow the rescored ones, in their BM25 order, and are flagged in the result.
``qres search``, ``qres evaluate`` and the benchmarks all go through :class:`SearchPipeline`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    def __init__(
        self,
        backend: Backend,
        encoder=None,
        fusion: Fusion = DEFAULT,
        candidates: int = DEFAULT_CANDIDATES,
    ):
        self.backend, self.encoder, self.fusion, self.candidates = (
            backend,
            encoder,
            fusion,
            candidates,
        )
        if encoder is not None:
            check_model_matches(backend, encoder)

    def search(
        self,
        text: str,
        k: int = 10,
        mode: str = "hybrid",
        only_ids: Sequence[str] | None = None,
        query_vector: np.ndarray | None = None,
    ) -> list[Result]:
        """Top ``k`` for ``text``; ``query_vector`` replaces encoding ``text`` (evaluation
        encodes a whole question, title and body, instead)."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
        window = max(k, self.candidates) if only_ids is None else len(only_ids)
        hits = self.backend.search(text, window, only_ids=only_ids)
        if mode == "bm25" or not hits:
            return [Result(h.id, h.score, h.score, None) for h in hits[:k]]
        if self.encoder is None:
            raise BackendError(f"{mode} search needs a model: pass --model MODEL_DIR")
        if query_vector is None:
            query_vector = self.encoder.encode_query(text)
        ids = [h.id for h in hits]
        bm25 = np.array([h.score for h in hits], dtype=np.float32)
        vectors, has_vector = self.backend.vectors(ids)
        cosine = vectors @ query_vector  # both sides are L2-normalised
        score = cosine if mode == "dense" else self.fusion.score(bm25, cosine)
        # Rescored candidates first by score; the ones without a vector after them, BM25 order.
        order = sorted(
            range(len(hits)), key=lambda i: (not has_vector[i], -score[i] if has_vector[i] else i)
        )
        fallback = normalize_bm25(bm25)
        return [
            Result(
                ids[i],
                float(score[i]) if has_vector[i] else float(fallback[i]),
                float(bm25[i]),
                float(cosine[i]) if has_vector[i] else None,
            )
            for i in order[:k]
        ]
