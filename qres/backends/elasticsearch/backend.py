"""The Elasticsearch backend: the same index, searched the same way, on a cluster.

Index layout (``es_config/`` holds the JSON the index is made from)::

    qres-questions           an alias: what searches and writes name
    qres-questions-v<N>      the physical index behind it; a rebuild fills v<N+1> and swaps
                             the alias in one ``_aliases`` call, then deletes v<N>

Documents hold ``id``, ``title``, ``body`` (English analyzer: possessives, stop words and
Porter2 stemming, as :func:`qres.text.bm25_terms` does), ``tags`` and, once a model is used,
``vector`` (``dense_vector``, cosine, indexed for kNN). The mapping's ``_meta`` is the index
metadata (analyzer, title boost, model fingerprint, vector dims).

The index refreshes only on :meth:`EsBackend.commit` (``refresh_interval: -1``) and reads use
``realtime=false``, so, as with the embedded backend, nothing written is visible to searches
before a commit.

Connection settings: :mod:`.config`; error messages: :mod:`.errors`; request and index
bodies: :mod:`.requests`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
from elastic_transport import ApiError as TransportApiError
from elasticsearch import NotFoundError, helpers

from qres.backends.base import Backend, BackendError, Hit
from qres.backends.elasticsearch.config import EsConfig, load_config, make_client
from qres.backends.elasticsearch.errors import (
    _describe_error,
    _error_type,
    _guarded,
    _short,
    guarded_on,
)
from qres.backends.elasticsearch.requests import (
    MAX_RESULT_WINDOW,
    RESCORE_SCRIPT,
    IndexSettings,
    bm25_query,
    cosine_field,
    load_es_config,
    search_log_document,
    terms_fields,
)
from qres.corpus import Question

log = logging.getLogger(__name__)

DEFAULT_INDEX = "qres-questions"
DEFAULT_LOG_INDEX = "qres-search-log"
_MGET_BATCH = 1000
_RETRY_STATUS = (429, 502, 503, 504)


class EsBackend(Backend):
    """A qres index on Elasticsearch: an alias over a versioned physical index.

    Rebuilds: ``EsBackend(..., rebuild=True)`` (or :meth:`begin_rebuild`) sends every write
    and read of this object to a fresh physical index while searches of the alias keep seeing
    the old one; leaving the ``with`` block normally (or :meth:`finish_rebuild`) swaps the
    alias atomically and deletes the old index; an exception, :meth:`abort_rebuild` or
    :meth:`close` without finishing deletes the new index and leaves the alias as it was.
    """

    name = "elasticsearch"
    bulk_docs = 500  # documents per bulk request
    bulk_bytes = 10 * 1024 * 1024
    bulk_retries = 5  # for 429 and 5xx answers, with exponential backoff
    bulk_initial_backoff = 1.0  # seconds
    bulk_max_backoff = 30.0

    def __init__(
        self,
        url: str | None = None,
        index: str = DEFAULT_INDEX,
        create: bool = False,
        *,
        rebuild: bool = False,
        config: EsConfig | None = None,
        node_class=None,
        **settings,
    ):
        """Open the index (alias) ``index`` at ``url`` (default: environment or es.json);
        with ``create``, make it if missing. ``settings`` (title_boost, analyzer, shards,
        replicas, vector_dims) shape a new index; ``log_index`` names the search log."""
        self.config = config or load_config(url)
        self.alias = index
        self.settings = IndexSettings.from_settings(settings)
        self.log_index = settings.get("log_index", DEFAULT_LOG_INDEX)
        self._client = make_client(self.config, node_class)
        self._target = index  # what reads and writes name: the alias, or the index being built
        self._physical: str | None = None
        self._rebuilding: str | None = None
        self._vector_dim: int | None = None
        self._title_boost = self.settings.title_boost
        self._analyzer = self.settings.analyzer
        self._log_ready = False
        try:
            if rebuild:
                self.begin_rebuild()
            else:
                self._open(create)
        except BaseException:
            self._client.close()
            raise

    def __repr__(self) -> str:
        return f"EsBackend(url={self.config.safe_url!r}, index={self.alias!r})"

    # -- opening, creating, rebuilding ---------------------------------------------------------

    @_guarded
    def _open(self, create: bool) -> None:
        try:
            answer = self._client.indices.get_mapping(index=self.alias)
        except NotFoundError as err:
            if not create or _error_type(err) != "index_not_found_exception":
                raise
            self._create(self._next_physical_name(), with_alias=True)
            return
        if len(answer) != 1:
            raise BackendError(
                f"{self.alias!r} at {self.config.safe_url} points at {len(answer)} indices "
                f"({', '.join(sorted(answer))}): rebuild it with "
                "`qres --backend elasticsearch index --rebuild CORPUS`"
            )
        ((physical, body),) = answer.items()
        self._adopt(physical, body.get("mappings", {}))

    def _adopt(self, physical: str, mappings: dict) -> None:
        properties = mappings.get("properties", {})
        if {"title", "body"} - set(properties):
            raise BackendError(
                f"{self.alias!r} at {self.config.safe_url} is not a qres index (no title and "
                "body fields): pick another index name"
            )
        meta = mappings.get("_meta", {})
        if {"title_terms", "body_terms"} - set(properties):
            raise BackendError(
                f"{self.alias!r} at {self.config.safe_url} was made by an older qres (index "
                f"format {meta.get('format', 1)}, analysed by Elasticsearch rather than as "
                "qres's own BM25 terms): rebuild it with "
                "`qres --backend elasticsearch index --rebuild CORPUS`"
            )
        self._physical = physical
        self._vector_dim = properties.get("vector", {}).get("dims")
        self._title_boost = float(meta.get("title_boost", 2.0))
        self._analyzer = meta.get("analyzer", "english")
        wanted = self.settings.vector_dims
        if wanted and self._vector_dim and wanted != self._vector_dim:
            raise BackendError(
                f"index {self.alias!r} at {self.config.safe_url} holds {self._vector_dim}-"
                f"dimensional vectors but the model makes {wanted}: rebuild it with "
                "`qres --backend elasticsearch index --rebuild CORPUS --model MODEL_DIR`"
            )

    def _server_version(self) -> tuple[int, int]:
        number = self._client.info()["version"]["number"]
        major, minor = re.match(r"(\d+)\.(\d+)", number).groups()
        return int(major), int(minor)

    def _create(self, physical: str, with_alias: bool) -> None:
        settings, mappings = self.settings.index_body(self._server_version())
        self._client.indices.create(
            index=physical,
            settings=settings,
            mappings=mappings,
            aliases={self.alias: {}} if with_alias else None,
        )
        self._adopt(physical, mappings)

    def _next_physical_name(self) -> str:
        answer = self._client.indices.resolve_index(name=f"{self.alias}-v*", expand_wildcards="all")
        pattern = re.compile(re.escape(self.alias) + r"-v(\d+)")
        versions = [
            int(m.group(1))
            for entry in answer.get("indices", [])
            if (m := pattern.fullmatch(entry["name"]))
        ]
        return f"{self.alias}-v{max(versions, default=0) + 1}"

    def _orphans(self) -> list[str]:
        """Versions of this index (``<alias>-v<N>``) neither behind the alias nor being built
        by this backend: what an interrupted rebuild left (a killed process cleans nothing)."""
        answer = self._client.indices.resolve_index(name=f"{self.alias}-v*", expand_wildcards="all")
        pattern = re.compile(re.escape(self.alias) + r"-v\d+")
        live, _ = self._behind_alias()
        return sorted(
            entry["name"]
            for entry in answer.get("indices", [])
            if pattern.fullmatch(entry["name"])
            and entry["name"] not in live
            and entry["name"] != self._rebuilding
        )

    def _behind_alias(self) -> tuple[list[str], bool]:
        """(physical indices the alias names, whether ``alias`` is itself a concrete index)."""
        try:
            answer = self._client.indices.resolve_index(name=self.alias)
        except NotFoundError as err:
            if _error_type(err) != "index_not_found_exception":
                raise
            return [], False
        for entry in answer.get("aliases", []):
            if entry["name"] == self.alias:
                return list(entry.get("indices", [])), False
        concrete = any(entry["name"] == self.alias for entry in answer.get("indices", []))
        return ([self.alias] if concrete else []), concrete

    @_guarded
    def begin_rebuild(self) -> str:
        """Create a fresh physical index (named ``<alias>-v<N+1>``) and send every read and
        write of this backend there; returns its name."""
        if self._rebuilding:
            raise BackendError(f"a rebuild of {self.alias!r} is already under way")
        orphans = self._orphans()
        if orphans:  # one rebuild at a time: another unfinished one was interrupted
            log.warning(
                "deleting %s, left behind by an interrupted rebuild of %s",
                ", ".join(orphans),
                self.alias,
            )
            self._client.indices.delete(index=orphans, ignore_unavailable=True)
        physical = self._next_physical_name()
        self._create(physical, with_alias=False)
        self._rebuilding = self._target = physical
        return physical

    @_guarded
    def finish_rebuild(self) -> None:
        """Refresh the new index, point the alias at it alone in one atomic ``_aliases`` call,
        then delete the index the alias named before."""
        if not self._rebuilding:
            raise BackendError("no rebuild under way: start one with begin_rebuild()")
        new = self._rebuilding
        self._client.indices.refresh(index=new)
        old, concrete = self._behind_alias()
        if concrete:  # an index named like the alias: replace it by the alias, atomically
            actions = [{"remove_index": {"index": self.alias}}]
        else:
            actions = [{"remove": {"index": name, "alias": self.alias}} for name in old]
        actions.append({"add": {"index": new, "alias": self.alias}})
        self._client.indices.update_aliases(actions=actions)
        self._rebuilding, self._target = None, self.alias
        leftovers = [name for name in old if name != new and not concrete]
        if leftovers:
            self._client.indices.delete(index=leftovers)

    @_guarded
    def abort_rebuild(self) -> None:
        """Delete the index being built; the alias keeps naming what it named before."""
        if not self._rebuilding:
            return
        new, self._rebuilding, self._target = self._rebuilding, None, self.alias
        self._client.indices.delete(index=new, ignore_unavailable=True)

    @_guarded
    def drop(self) -> None:
        """Delete the index: the alias and every physical index behind it (and a rebuild's)."""
        self.abort_rebuild()
        names, _ = self._behind_alias()
        if names:
            self._client.indices.delete(index=names, ignore_unavailable=True)

    # -- writing -------------------------------------------------------------------------------

    @_guarded
    def upsert(
        self,
        questions: Sequence[Question],
        vectors: np.ndarray | None = None,
        terms: Sequence | None = None,  # unused: terms_fields() below works them out
    ) -> None:
        rows = None
        if vectors is not None:
            if len(vectors) != len(questions):
                raise ValueError(f"{len(questions)} questions but {len(vectors)} vectors")
            rows = np.asarray(vectors, dtype=np.float32)
            self._ensure_vector_field(int(rows.shape[1]))

        def actions() -> Iterator[dict]:
            for i, question in enumerate(questions):
                source = {
                    "id": question.id,
                    "title": question.title,
                    "body": question.body,
                    **terms_fields(question.title, question.body, self._analyzer),
                    "tags": list(question.tags),
                }
                if rows is not None:
                    source["vector"] = rows[i].tolist()
                yield {
                    "_op_type": "index",
                    "_index": self._target,
                    "_id": question.id,
                    "_source": source,
                }

        self._bulk(actions(), len(questions), "indexed")

    def _ensure_vector_field(self, dims: int) -> None:
        if self._vector_dim is None:
            mapping = self.settings.vector_mapping(dims)
            self._client.indices.put_mapping(index=self._target, properties={"vector": mapping})
            self._vector_dim = dims
            self.set_metadata({"vector_dim": dims})
        elif dims != self._vector_dim:
            raise BackendError(
                f"vectors have {dims} dimensions but the index holds {self._vector_dim}: "
                "re-index with `qres --backend elasticsearch index --rebuild CORPUS`"
            )

    @_guarded
    def delete(self, ids: Sequence[str]) -> None:
        actions = ({"_op_type": "delete", "_index": self._target, "_id": qid} for qid in ids)
        self._bulk(actions, len(ids), "deleted")

    def _bulk(self, actions: Iterable[dict], total: int, done: str) -> None:
        """Send ``actions`` in batches; raise one BackendError naming the first failures."""
        failures: list[tuple[str, str]] = []
        results = helpers.streaming_bulk(
            self._client,
            actions,
            chunk_size=self.bulk_docs,
            max_chunk_bytes=self.bulk_bytes,
            raise_on_error=False,
            raise_on_exception=True,
            max_retries=self.bulk_retries,
            initial_backoff=self.bulk_initial_backoff,
            max_backoff=self.bulk_max_backoff,
            retry_on_status=_RETRY_STATUS,
            yield_ok=False,
        )
        for _, item in results:
            ((op, info),) = item.items()
            if op == "delete" and info.get("status") == 404 and "error" not in info:
                continue  # deleting an unknown id is not an error
            failures.append((str(info.get("_id")), _bulk_reason(info)))
        if failures:
            shown = "; ".join(f"{qid} ({reason})" for qid, reason in failures[:5])
            more = f"; and {len(failures) - 5} more" if len(failures) > 5 else ""
            raise BackendError(
                self.config.scrub(
                    f"{len(failures)} of {total} questions were not {done} in {self._target} at "
                    f"{self.config.safe_url}: {shown}{more}: fix them and run the command again"
                )
            )

    @_guarded
    def commit(self) -> None:
        self._client.indices.refresh(index=self._target)

    # -- searching -----------------------------------------------------------------------------

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

    @_guarded
    def search_with_cosine(
        self, text: str, k: int, query_vector, only_ids: Sequence[str] | None = None
    ) -> tuple[list[Hit], np.ndarray, np.ndarray]:
        """One request: the BM25 top-``k`` with each hit's cosine computed inside the cluster
        (a script field), so no vector leaves it; qres fuses the two scores as it does for
        the embedded backend."""
        query = self._bm25(text, only_ids)
        if query is None or k <= 0 or (only_ids is not None and not only_ids):
            return [], np.zeros(0, np.float32), np.zeros(0, bool)
        answer = self._ranked(
            query, k, script_fields={"cosine": cosine_field(self._query_vector(query_vector))}
        )
        hits = self._hits(answer)
        cosine = np.zeros(len(hits), np.float32)
        has_vector = np.zeros(len(hits), bool)
        for row, hit in enumerate(answer["hits"]["hits"]):
            values = (hit.get("fields") or {}).get("cosine") or [None]
            if values[0] is not None:
                cosine[row], has_vector[row] = values[0], True
        return hits, cosine, has_vector

    def _query_vector(self, query_vector) -> list[float]:
        vector = np.asarray(query_vector, dtype=np.float32).ravel()
        if self._vector_dim is None:
            raise BackendError(
                f"index {self.alias!r} at {self.config.safe_url} holds no vectors: index it "
                "with `qres --backend elasticsearch index CORPUS --model MODEL_DIR`"
            )
        if len(vector) != self._vector_dim:
            raise BackendError(
                f"the query vector has {len(vector)} dimensions but {self.alias!r} holds "
                f"{self._vector_dim}-dimensional vectors: use the model the index was built with"
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

    # -- reading stored fields -----------------------------------------------------------------

    def _sources(self, ids: Sequence[str], fields: list[str]) -> dict[str, dict]:
        """``_source`` (only ``fields``) of the documents with these ids, as last committed."""
        found: dict[str, dict] = {}
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), _MGET_BATCH):
            answer = self._client.mget(
                index=self._target,
                ids=unique[start : start + _MGET_BATCH],
                source_includes=fields,
                realtime=False,
            )
            for doc in answer["docs"]:
                if doc.get("found"):
                    found[doc["_id"]] = doc.get("_source", {})
        return found

    @_guarded
    def fetch(self, ids: Sequence[str]) -> dict[str, Question]:
        out = {}
        for qid, source in self._sources(ids, ["title", "body", "tags"]).items():
            tags = source.get("tags") or ()
            tags = (tags,) if isinstance(tags, str) else tuple(tags)
            out[qid] = Question(qid, source.get("title", ""), source.get("body", ""), tags)
        return out

    @_guarded
    def vectors(self, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        if self._vector_dim is None:
            return np.zeros((len(ids), 0), np.float32), np.zeros(len(ids), bool)
        out = np.zeros((len(ids), self._vector_dim), np.float32)
        have = np.zeros(len(ids), bool)
        sources = self._sources(ids, ["vector"])
        for row, qid in enumerate(ids):
            vector = sources.get(qid, {}).get("vector")
            if vector is not None:
                out[row] = vector
                have[row] = True
        return out, have

    @_guarded
    def count(self) -> int:
        return int(self._client.count(index=self._target)["count"])

    @_guarded
    def metadata(self) -> dict:
        answer = self._client.indices.get_mapping(index=self._target)
        mappings = next(iter(answer.values()), {}).get("mappings", {})
        return dict(mappings.get("_meta", {}))

    @_guarded
    def set_metadata(self, values: dict) -> None:
        meta = self.metadata()
        meta.update(values)
        self._client.indices.put_mapping(index=self._target, meta=meta)

    # -- search analytics and information ------------------------------------------------------

    keeps_search_log = True

    @guarded_on("log_index")
    def log_search(self, record: dict) -> None:
        """Write one search ``record`` (see :func:`search_log_document`) to the search log
        index, creating it from es_config/search-log-template.json if missing."""
        document = search_log_document(record, self.name, self.alias)
        if not self._log_ready:
            if not self._client.indices.exists(index=self.log_index):
                template = load_es_config("search-log-template.json")["template"]
                try:
                    self._client.indices.create(
                        index=self.log_index,
                        settings=template["settings"],
                        mappings=template["mappings"],
                    )
                except TransportApiError as err:  # another process created it first
                    if _error_type(err) != "resource_already_exists_exception":
                        raise
            self._log_ready = True
        self._client.index(index=self.log_index, document=document)

    @_guarded
    def describe(self) -> dict:
        """Connection and index facts for ``qres info``; secrets are masked."""
        info = self._client.info()
        return {
            "backend": self.name,
            "url": self.config.safe_url,
            "auth": self.config.auth_summary(),
            "ca_cert": self.config.ca_cert,
            "config_file": self.config.config_file,
            "server_version": info["version"]["number"],
            "cluster_name": info.get("cluster_name"),
            "index": self.alias,
            "physical_index": self._physical,
            "rebuilding": self._rebuilding,
            "orphaned_indices": self._orphans(),  # deleted by the next --rebuild
            "documents": self.count(),
            "analyzer": self._analyzer,
            "title_boost": self._title_boost,
            "vector_dim": self._vector_dim,
            "search_log_index": self.log_index,
        }

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Release the connection; an unfinished rebuild is discarded."""
        unfinished = self._rebuilding
        if unfinished:
            log.warning("discarding the unfinished rebuild %s of %s", unfinished, self.alias)
            try:
                self.abort_rebuild()
            except BackendError as err:  # the cluster may be what failed: keep the first error
                log.warning("could not delete %s: %s", unfinished, err)
        self._client.close()

    def __exit__(self, exc_type, exc, tb):
        if self._rebuilding and exc_type is None:
            try:
                self.finish_rebuild()
            except BaseException:
                self.close()
                raise
        self.close()


def _bulk_reason(info: dict) -> str:
    error = info.get("error")
    if isinstance(error, dict):
        return _short(_describe_error(error), 160)
    if error:
        return _short(str(error), 160)
    return f"HTTP {info.get('status')}"
