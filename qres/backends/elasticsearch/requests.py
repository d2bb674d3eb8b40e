"""What the Elasticsearch backend sends: index settings and mappings from ``es_config/``,
the indexed terms of a question, the BM25 query, the cosine script, search-log documents."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources

from qres.backends.base import BackendError
from qres.text import bm25_terms, words

# es_config/ of the repository, installed as the package qres.es_config (a wheel has no checkout).
CONFIG_DIR = resources.files("qres.es_config")
MAX_RESULT_WINDOW = 10_000  # Elasticsearch's index.max_result_window default
_MAX_QUERY_TERMS = 1024  # a 10 kB query is still searched, by its first 1024 distinct terms
# Painless: documents without a vector get 0, below every cosine + 1 (which is in [0, 2]).
RESCORE_SCRIPT = (
    "doc['vector'].size() == 0 ? 0.0 : cosineSimilarity(params.query_vector, 'vector') + 1.0"
)
VECTOR_FIELD = "vector"  # the first model's vectors; a further model's: vector_<fingerprint16>
STORED_FIELDS = ["title", "body", "tags", "extras"]  # what fetch() reads from _source


def cosine_source(field: str = VECTOR_FIELD) -> str:
    """Painless (fields API, any script context): a hit's cosine with ``params.query_vector``
    over the vector field ``field``, null when the hit has no vector there."""
    return (
        f"def v = field('{field}').get(); "
        "return v.isEmpty() ? null : v.cosineSimilarity(params.query_vector);"
    )


COSINE_SCRIPT = cosine_source()
# 2: title and body indexed as the terms qres.text computes (1: analysed by Elasticsearch);
# 3: as 2, with a vector field per model (``more_models`` in the metadata).
INDEX_FORMAT = 2
NEWEST_FORMAT = 3


def vector_field(fingerprint: str | None, first: bool) -> str:
    """The field holding a model's vectors: ``vector`` for the index's first model, as a
    one-model index has it, ``vector_<first 16 hex of the fingerprint>`` for the others."""
    return VECTOR_FIELD if first else f"{VECTOR_FIELD}_{fingerprint[:16]}"


def load_es_config(name: str) -> dict:
    """A JSON file of ``es_config/``."""
    path = CONFIG_DIR / name
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise BackendError(f"{path}: cannot load the Elasticsearch configuration ({err})") from None


@dataclass(frozen=True)
class IndexSettings:
    """What a new physical index is made with."""

    title_boost: float = 2.0
    analyzer: str = "english"  # or "plain": lower-cased words, no stemming, no stop words
    shards: int = 1
    replicas: int | None = None  # None: 0 on one node, 1 once the cluster has a second
    vector_dims: int | None = None  # None: set by the first upsert with vectors

    @classmethod
    def from_settings(cls, settings: dict) -> IndexSettings:
        def number(key, kind, default, minimum):
            value = settings.get(key, default)
            if value is None:
                return None
            try:
                value = kind(value)
            except (TypeError, ValueError):
                raise BackendError(f"{key} must be a number, got {value!r}") from None
            if value < minimum or (kind is float and not math.isfinite(value)):
                raise BackendError(f"{key} must be at least {minimum}, got {value!r}")
            return value

        analyzer = settings.get("analyzer", "english")
        if analyzer not in ("english", "plain"):
            raise BackendError(f"unknown analyzer {analyzer!r} (one of english, plain)")
        return cls(
            title_boost=number("title_boost", float, 2.0, 0.0),
            analyzer=analyzer,
            shards=number("shards", int, 1, 1),
            replicas=number("replicas", int, None, 0),
            vector_dims=number("vector_dims", int, None, 1),
        )

    def vector_mapping(self, dims: int) -> dict:
        return {**load_es_config("vector-field.json"), "dims": int(dims)}

    def index_body(self, server: tuple[int, int] = (8, 0)) -> tuple[dict, dict]:
        """(settings, mappings) of a new physical index, from es_config/questions-template.json,
        for a server of version ``server`` (major, minor)."""
        template = load_es_config("questions-template.json")["template"]
        settings, mappings = (
            copy.deepcopy(template["settings"]),
            copy.deepcopy(template["mappings"]),
        )
        index = settings.setdefault("index", {})
        index["number_of_shards"] = self.shards
        if self.replicas is not None:
            index["number_of_replicas"] = self.replicas
            index["auto_expand_replicas"] = "false"
        if server >= (9, 2):  # 9.2 drops vectors from _source by default; vectors() reads them
            index.setdefault("mapping", {})["exclude_source_vectors"] = False
        meta = {
            "format": INDEX_FORMAT,
            "backend": "elasticsearch",
            "analyzer": self.analyzer,
            "title_boost": self.title_boost,
        }
        if self.vector_dims:
            mappings["properties"]["vector"] = self.vector_mapping(self.vector_dims)
            meta["vector_dim"] = self.vector_dims
        mappings["_meta"] = meta
        return settings, mappings


def extras_mapping() -> dict:
    """The ``extras`` field of es_config/questions-template.json, for an index made before the
    template had it (``{"extras": {...}}``, as ``put_mapping`` takes new properties)."""
    properties = load_es_config("questions-template.json")["template"]["mappings"]["properties"]
    return {"extras": properties["extras"]}


def terms_of(text: str, analyzer: str = "english") -> list[str]:
    """BM25 terms of ``text`` as :mod:`qres.text` computes them for the embedded backend."""
    return bm25_terms(text, "english" if analyzer == "english" else None)


def terms_fields(title: str, body: str, analyzer: str) -> dict:
    """The indexed fields of a question: its terms, space-separated (the index's whitespace
    analyzer splits them back into exactly these terms)."""
    return {
        "title_terms": " ".join(terms_of(title, analyzer)),
        "body_terms": " ".join(terms_of(body, analyzer)),
    }


def title_words_field(title: str) -> dict:
    """The ``title_words`` field of a question: its title's words
    (:func:`qres.text.words`), a keyword each."""
    return {"title_words": words(title)}


def title_words_request(prefix: str, n: int) -> dict:
    """The search counting the questions whose title holds each word starting with
    ``prefix``: a terms aggregation over the questions holding one, most first, ties by the
    word (its default order), as the embedded backend counts them."""
    return {
        "size": 0,
        "track_total_hits": False,
        "query": {"prefix": {"title_words": prefix}},
        "aggs": {
            "words": {"terms": {"field": "title_words", "size": n, "include": _regexp(prefix)}}
        },
    }


def _regexp(prefix: str) -> str:
    """A Lucene regular expression of the words starting with ``prefix`` (every character
    taken literally)."""
    return "".join(c if c.isalnum() else "\\" + c for c in prefix) + ".*"


def query_terms(text: str, analyzer: str = "english", limit: int = _MAX_QUERY_TERMS) -> list[str]:
    """The distinct BM25 terms of ``text`` in order, at most ``limit`` (a repeated term counts
    once, as in the embedded backend)."""
    return list(dict.fromkeys(terms_of(text, analyzer)))[:limit]


def bm25_query(
    text: str, analyzer: str, title_boost: float, only_ids: Sequence[str] | None = None
) -> dict | None:
    """The first-stage query: the sum of the title (boosted) and body BM25 scores of the
    query's terms; None when ``text`` has no terms. ``only_ids`` restricts it to those ids,
    the ones matching no term scoring 0 (a filter scores 0)."""
    terms = query_terms(text, analyzer)
    match = None
    if terms:
        match = {
            "multi_match": {
                "query": " ".join(terms),
                "type": "most_fields",
                "fields": [f"title_terms^{title_boost}", "body_terms"],
            }
        }
    if only_ids is None:
        return match
    query: dict = {"bool": {"filter": [{"ids": {"values": list(only_ids)}}]}}
    if match is not None:
        query["bool"]["should"] = [match]
    return query


def exact_nearest_query(query_vector: list[float], field: str = VECTOR_FIELD) -> dict:
    """Every question scored cosine + 1 from its doc values (``script_score`` wants scores
    >= 0), 0 without a vector in ``field``; search it with :data:`HAS_VECTOR_SCORE` as
    ``min_score`` so those never come back."""
    return {
        "script_score": {
            "query": {"match_all": {}},
            "script": {
                "source": f"doc['{field}'].size() == 0 ? 0.0 : "
                f"cosineSimilarity(params.query_vector, '{field}') + 1.0",
                "params": {"query_vector": query_vector},
            },
        }
    }


HAS_VECTOR_SCORE = 1e-6  # min_score of exact_nearest_query: leaves out questions without one


def cosine_field(query_vector: list[float], field: str = VECTOR_FIELD) -> dict:
    """A ``script_fields`` entry: each hit's cosine with ``query_vector`` over the vector
    field ``field``, null where the hit has no vector there."""
    return {"script": {"source": cosine_source(field), "params": {"query_vector": query_vector}}}


def search_log_document(record: dict, backend: str, index: str) -> dict:
    """The ``qres-search-log`` document of one search ``record``.

    Keys: ``time`` (datetime, epoch seconds or ISO string; default now), ``query``, ``mode``,
    ``latency_ms``, ``k``, ``top_ids``, ``top_scores``, ``result_count`` (default
    ``len(top_ids)``), ``backend``, ``index``; any other key is kept, unindexed, under ``extra``.
    """
    record = dict(record)
    when = record.pop("time", None)
    if when is None:
        when = datetime.now(timezone.utc)
    elif isinstance(when, (int, float)):
        when = datetime.fromtimestamp(when, timezone.utc)
    doc = {"@timestamp": when.isoformat() if isinstance(when, datetime) else str(when)}
    doc["query"] = str(record.pop("query", ""))
    doc["mode"] = str(record.pop("mode", "bm25"))
    doc["latency_ms"] = float(record.pop("latency_ms", 0.0))
    if "k" in record:
        doc["k"] = int(record.pop("k"))
    doc["top_ids"] = [str(i) for i in record.pop("top_ids", [])]
    doc["top_scores"] = [float(s) for s in record.pop("top_scores", [])]
    doc["result_count"] = int(record.pop("result_count", len(doc["top_ids"])))
    doc["backend"] = str(record.pop("backend", backend))
    doc["index"] = str(record.pop("index", index))
    if record:
        doc["extra"] = record
    return doc
