"""Searching an Elasticsearch index as qres does: the BM25 query over qres's own terms, the
cosines computed in the cluster from doc values (one script field per model), the nearest
neighbours of the dense first stage, and two further in-cluster rankings. A part of
:class:`qres.backends.elasticsearch.EsBackend`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qres.backends.base import (
    BackendError,
    Candidates,
    Hit,
)
from qres.backends.elasticsearch.errors import (
    _guarded,
)
from qres.backends.elasticsearch.requests import (
    HAS_VECTOR_SCORE,
    MAX_RESULT_WINDOW,
    RESCORE_SCRIPT,
    VECTOR_FIELD,
    bm25_query,
    cosine_field,
    exact_nearest_query,
    title_words_request,
)


class Searching:
    def _bm25(self, text: str, only_ids: Sequence[str] | None = None) -> dict | None:
        return bm25_query(text, self._analyzer, self._title_boost, only_ids)

    @staticmethod
    def _hits(answer) -> list[Hit]:
        return [Hit(h["_id"], float(h["_score"] or 0.0)) for h in answer["hits"]["hits"]]

    @_guarded
    def search(self, text: str, k: int, only_ids: Sequence[str] | None = None) -> list[Hit]:
        query = self._bm25(text, only_ids)
        if query is None or k <= 0 or (only_ids is not None and not only_ids):
            return []
        return self._hits(self._ranked(query, k))

    @property
    def completes_first_words(self) -> bool:
        return self._has_title_words

    @_guarded
    def title_words(self, prefix: str, n: int) -> list[tuple[str, int]]:
        if not self.completes_first_words or not prefix or n <= 0:
            return []
        answer = self._client.search(index=self._target, **title_words_request(prefix, n))
        buckets = answer["aggregations"]["words"]["buckets"]
        return [(b["key"], int(b["doc_count"])) for b in buckets]

    def candidates(
        self,
        text: str,
        k: int,
        only_ids: Sequence[str] | None = None,
        query_vector: np.ndarray | dict | None = None,
    ) -> Candidates:
        """As :meth:`Backend.candidates`; ``query_vector`` may be ``{fingerprint: vector}``
        (an index of several models): one request gives every model's cosines."""
        if not isinstance(query_vector, dict):
            return super().candidates(text, k, only_ids, query_vector)
        hits, cosines, has_vector = self._search_cosines(text, k, query_vector, only_ids)
        first = next(iter(cosines.values()), np.zeros(0, np.float32))
        return Candidates(hits, first, has_vector, cosines)

    def search_with_cosine(
        self, text: str, k: int, query_vector, only_ids: Sequence[str] | None = None
    ) -> tuple[list[Hit], np.ndarray, np.ndarray]:
        """One request: the BM25 top-``k`` with each hit's cosine computed inside the cluster
        (a script field), so no vector leaves it; qres fuses the two scores as it does for
        the embedded backend."""
        hits, cosines, has_vector = self._search_cosines(text, k, {None: query_vector}, only_ids)
        return hits, cosines[None], has_vector

    @_guarded
    def _search_cosines(
        self, text: str, k: int, queries: dict, only_ids: Sequence[str] | None
    ) -> tuple[list[Hit], dict, np.ndarray]:
        """The BM25 top-``k`` and, by one script field per model, each hit's cosine to each
        of ``queries`` ({fingerprint: query vector}; None: the first model); a hit has a
        vector when it has every model's."""
        query = self._bm25(text, only_ids)
        if query is None or k <= 0 or (only_ids is not None and not only_ids):
            return [], {fp: np.zeros(0, np.float32) for fp in queries}, np.zeros(0, bool)
        fields = {fp: self._field_of(fp) for fp in queries}
        names = {fp: "cosine" + field[len(VECTOR_FIELD) :] for fp, field in fields.items()}
        script_fields = {
            names[fp]: cosine_field(self._query_vector(vector, fields[fp]), fields[fp])
            for fp, vector in queries.items()
        }
        answer = self._ranked(query, k, script_fields=script_fields)
        hits = self._hits(answer)
        cosines = {fp: np.zeros(len(hits), np.float32) for fp in queries}
        has_vector = np.ones(len(hits), bool)
        for row, hit in enumerate(answer["hits"]["hits"]):
            values = hit.get("fields") or {}
            for fp, name in names.items():
                value = (values.get(name) or [None])[0]
                if value is None:
                    has_vector[row] = False
                else:
                    cosines[fp][row] = value
        return hits, cosines, has_vector

    def _query_vector(self, query_vector, field: str = VECTOR_FIELD) -> list[float]:
        vector = np.asarray(query_vector, dtype=np.float32).ravel()
        dims = self._dims.get(field)
        if dims is None:
            raise BackendError(
                f"index {self.alias!r} at {self.config.safe_url} holds no vectors"
                + (f" in {field}" if field != VECTOR_FIELD else "")
                + ": index it with `qres --backend elasticsearch index CORPUS --model MODEL_DIR`"
            )
        if len(vector) != dims:
            raise BackendError(
                f"the query vector has {len(vector)} dimensions but {self.alias!r} holds "
                f"{dims}-dimensional vectors"
                + (f" in {field}" if field != VECTOR_FIELD else "")
                + ": use the model the index was built with"
            )
        return vector.tolist()

    @_guarded
    def search_rescored(
        self,
        text: str,
        k: int,
        query_vector,
        window: int = 100,
        weights: tuple[float, float] = (1.0, 1.0),
    ) -> list[Hit]:
        """BM25 top-``k`` whose best ``max(window, k)`` are rescored inside Elasticsearch:
        ``weights[0] * bm25 + weights[1] * (cosine(query_vector, vector) + 1)``; documents
        without a vector get 0 for the cosine part."""
        query = self._bm25(text)
        if query is None or k <= 0:
            return []
        rescore = {
            "window_size": min(max(window, k), MAX_RESULT_WINDOW),
            "query": {
                "rescore_query": {
                    "script_score": {
                        "query": {"match_all": {}},
                        "script": {
                            "source": RESCORE_SCRIPT,
                            "params": {"query_vector": self._query_vector(query_vector)},
                        },
                    }
                },
                "query_weight": float(weights[0]),
                "rescore_query_weight": float(weights[1]),
                "score_mode": "total",
            },
        }
        return self._hits(self._ranked(query, k, rescore=rescore))

    supports_nearest = True
    KNN_SINCE = (8, 4)  # the top-level `knn` section of _search

    @_guarded
    def nearest(self, query_vector, k: int, model: str | None = None) -> list[Hit]:
        """The dense first stage on the cluster: its approximate nearest-neighbour search
        (HNSW over the ``index: true`` vector field, top-level ``knn``, 8.4 on; the score
        of the ``cosine`` similarity is (1 + cosine) / 2), or, on older servers, an exact
        ``script_score`` over every question with a vector. ``Hit.score`` is the cosine."""
        if k <= 0:
            return []
        field = self._field_of(model)
        vector = self._query_vector(query_vector, field)
        k = min(k, MAX_RESULT_WINDOW)
        options = {"size": k, "source": False, "track_total_hits": False}
        if self._version() >= self.KNN_SINCE:
            candidates = min(max(2 * k, 100), MAX_RESULT_WINDOW)
            knn = {"field": field, "query_vector": vector, "k": k, "num_candidates": candidates}
            answer = self._client.search(index=self._target, knn=knn, **options)
            return [Hit(h.id, 2.0 * h.score - 1.0) for h in self._hits(answer)]
        query = exact_nearest_query(vector, field)
        answer = self._client.search(
            index=self._target, query=query, min_score=HAS_VECTOR_SCORE, **options
        )
        return [Hit(h.id, h.score - 1.0) for h in self._hits(answer)]

    def _version(self) -> tuple[int, int]:
        if self._server is None:
            self._server = self._server_version()
        return self._server

    @_guarded
    def knn_search(
        self,
        query_vector,
        k: int,
        num_candidates: int | None = None,
        text: str | None = None,
        weights: tuple[float, float] = (1.0, 1.0),
    ) -> list[Hit]:
        """Approximate nearest neighbours by cosine (HNSW), ``num_candidates`` per shard
        (default ``max(100, 2k)``); with ``text``, a hybrid: Elasticsearch adds
        ``weights[0] * bm25`` and ``weights[1] * (1 + cosine) / 2``."""
        if k <= 0:
            return []
        k = min(k, MAX_RESULT_WINDOW)
        candidates = min(max(num_candidates or max(100, 2 * k), k), MAX_RESULT_WINDOW)
        knn = {
            "field": "vector",
            "query_vector": self._query_vector(query_vector),
            "k": k,
            "num_candidates": candidates,
            "boost": float(weights[1]),
        }
        options: dict = {}
        query = self._bm25(text) if text else None
        if query is not None:
            query["multi_match"]["boost"] = float(weights[0])
            options["query"] = query
        answer = self._client.search(
            index=self._target, knn=knn, size=k, source=False, track_total_hits=False, **options
        )
        return self._hits(answer)

    def _ranked(self, query: dict, k: int, **extra):
        """The top ``k`` ids and scores of ``query`` (no ``_source``, no hit count)."""
        return self._client.search(
            index=self._target,
            query=query,
            size=min(k, MAX_RESULT_WINDOW),
            source=False,
            track_total_hits=False,
            **extra,
        )
