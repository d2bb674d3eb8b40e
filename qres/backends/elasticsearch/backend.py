"""The Elasticsearch backend: the same index, searched the same way, on a cluster.

Index layout (``es_config/`` holds the JSON the index is made from)::

    qres-questions           an alias: what searches and writes name
    qres-questions-v<N>      the physical index behind it; a rebuild fills v<N+1> and swaps
                             the alias in one ``_aliases`` call, then deletes v<N>

Documents hold ``id``, ``title``, ``body``, their BM25 terms (``title_terms``, ``body_terms``:
:func:`qres.text.bm25_terms`, split back by a whitespace analyzer), ``tags``, ``extras`` (what a
forum shows beside a question: an object kept in ``_source``, neither indexed nor ranked on;
an index made before it had the field gets it mapped by the first write that has extras)
and, once a model is used, ``vector`` (``dense_vector``, cosine, indexed for kNN); an index of
several models has one more field per further model, ``vector_<first 16 hex of its
fingerprint>``. The mapping's ``_meta`` is the index metadata (analyzer, title boost, model
fingerprints, vector dims; ``more_models`` as in the embedded backend).

The index refreshes only on :meth:`EsBackend.commit` (``refresh_interval: -1``) and reads use
``realtime=false``, so, as with the embedded backend, nothing written is visible to searches
before a commit.

Connection settings: :mod:`.config`; error messages: :mod:`.errors`; request and index
bodies: :mod:`.requests`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterable, Iterator, Sequence

import numpy as np
from elastic_transport import ApiError as TransportApiError
from elasticsearch import NotFoundError, helpers

from qres.backends.base import (
    Backend,
    BackendError,
    IndexFormatError,
    check_ids,
    index_models,
)
from qres.backends.elasticsearch.config import EsConfig, load_config, make_client
from qres.backends.elasticsearch.errors import (
    BUSY,
    _describe_error,
    _error_type,
    _guarded,
    _short,
    explain,
    guarded_on,
)
from qres.backends.elasticsearch.requests import (
    NEWEST_FORMAT,
    STORED_FIELDS,
    VECTOR_FIELD,
    IndexSettings,
    extras_mapping,
    load_es_config,
    search_log_document,
    terms_fields,
    title_words_field,
    vector_field,
)
from qres.backends.elasticsearch.searching import Searching
from qres.backends.elasticsearch.versions import VersionedAlias
from qres.corpus.readers import Question

log = logging.getLogger(__name__)

DEFAULT_INDEX = "qres-questions"
DEFAULT_LOG_INDEX = "qres-search-log"
_MGET_BATCH = 1000
ID_PAGE = 10_000  # ids one page of ids_not_in reads (a cluster's most by default)


class EsBackend(VersionedAlias, Searching, Backend):
    """A qres index on Elasticsearch: an alias over a versioned physical index.

    Rebuilds: ``EsBackend(..., rebuild=True)`` (or :meth:`begin_rebuild`) sends every write
    and read of this object to a fresh physical index while searches of the alias keep seeing
    the old one; leaving the ``with`` block normally (or :meth:`finish_rebuild`) swaps the
    alias atomically and deletes the old index; an exception, :meth:`abort_rebuild` or
    :meth:`close` without finishing deletes the new index and leaves the alias as it was.
    """

    name = "elasticsearch"
    several_models = True
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
        self._dims: dict[str, int] = {}  # vector field -> dimensions, as the mapping says
        self._has_extras = False  # whether the mapping has the extras field
        self._has_title_words = False  # whether it has title_words (Backend.title_words)
        self._server: tuple[int, int] | None = None  # (major, minor), asked once
        self._meta: dict = {}  # the mapping's _meta, as last read or written here
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
        if int(meta.get("format", 1)) > NEWEST_FORMAT:
            raise IndexFormatError(
                f"{self.alias!r} at {self.config.safe_url} was made by a newer qres (index "
                f"format {meta['format']}): upgrade qres to use it"
            )
        if {"title_terms", "body_terms"} - set(properties):
            raise BackendError(
                f"{self.alias!r} at {self.config.safe_url} was made by an older qres (index "
                f"format {meta.get('format', 1)}, analysed by Elasticsearch rather than as "
                "qres's own BM25 terms): rebuild it with "
                "`qres --backend elasticsearch index --rebuild CORPUS`"
            )
        self._physical = physical
        self._has_extras = "extras" in properties
        self._has_title_words = "title_words" in properties  # not in an index made before
        self._dims = {
            name: int(field["dims"])
            for name, field in properties.items()
            if field.get("type") == "dense_vector" and "dims" in field
        }
        self._meta = dict(meta)
        self._title_boost = float(meta.get("title_boost", 2.0))
        self._analyzer = meta.get("analyzer", "english")
        wanted = self.settings.vector_dims
        if wanted and self._vector_dim and wanted != self._vector_dim:
            raise BackendError(
                f"index {self.alias!r} at {self.config.safe_url} holds {self._vector_dim}-"
                f"dimensional vectors but the model makes {wanted}: rebuild it with "
                "`qres --backend elasticsearch index --rebuild CORPUS --model MODEL_DIR`"
            )

    @property
    def _vector_dim(self) -> int | None:
        """Dimensions of the (first) model's vectors; None before any are written."""
        return self._dims.get(VECTOR_FIELD)

    def _model_fields(self) -> dict[str | None, str]:
        """{model fingerprint: its vector field} of the models the index holds, the first
        model first (None: vectors of a model the metadata does not name)."""
        models = [m["model_fingerprint"] for m in index_models(self._meta)]
        if not models:
            return {None: VECTOR_FIELD} if VECTOR_FIELD in self._dims else {}
        return {fp: vector_field(fp, i == 0) for i, fp in enumerate(models)}

    def _field_of(self, fingerprint: str | None) -> str:
        """The vector field of model ``fingerprint`` (None: the index's first model)."""
        if fingerprint is None:
            return VECTOR_FIELD
        if fingerprint not in self._model_fields():  # added by another process since we opened
            ((physical, body),) = self._client.indices.get_mapping(index=self._target).items()
            self._adopt(physical, body.get("mappings", {}))
        fields = self._model_fields()
        if fingerprint not in fields:
            held = ", ".join(fp[:12] for fp in fields if fp) or "none"
            raise BackendError(
                f"index {self.alias!r} at {self.config.safe_url} holds no vectors of model "
                f"{fingerprint[:12]} (it holds {held}): add it with "
                "`qres --backend elasticsearch index CORPUS --model ... --model MODEL_DIR`"
            )
        return fields[fingerprint]

    def _server_version(self) -> tuple[int, int]:
        number = self._client.info()["version"]["number"]
        major, minor = re.match(r"(\d+)\.(\d+)", number).groups()
        return int(major), int(minor)

    # -- writing -------------------------------------------------------------------------------

    @_guarded
    def upsert(
        self,
        questions: Sequence[Question],
        vectors: np.ndarray | dict | None = None,
        terms: Sequence | None = None,  # unused: terms_fields() below works them out
    ) -> None:
        """As :meth:`Backend.upsert`; ``vectors``: an array (an index of one model) or
        ``{fingerprint: array}`` with an entry for every model of the index."""
        check_ids(questions)
        blocks = {} if vectors is None else self._vector_blocks(vectors, len(questions))
        self._index(questions, blocks, "indexed")

    def _index(self, questions: Sequence[Question], blocks: dict, done: str) -> None:
        """Index ``questions`` whole (terms computed here), with ``blocks``' vectors
        ({vector field: rows})."""

        def actions() -> Iterator[dict]:
            for i, question in enumerate(questions):
                source = {
                    "id": question.id,
                    "title": question.title,
                    "body": question.body,
                    **terms_fields(question.title, question.body, self._analyzer),
                    "tags": list(question.tags),
                }
                if self._has_title_words:
                    source |= title_words_field(question.title)
                if question.extras:
                    source["extras"] = dict(question.extras)
                for field, rows in blocks.items():
                    source[field] = rows[i].tolist()
                yield {
                    "_op_type": "index",
                    "_index": self._target,
                    "_id": question.id,
                    "_source": source,
                }

        if not self._has_extras and any(q.extras for q in questions):
            self._client.indices.put_mapping(index=self._target, properties=extras_mapping())
            self._has_extras = True
        self._bulk(actions(), len(questions), done)

    def _vector_blocks(self, vectors, n: int) -> dict[str, np.ndarray]:
        """``vectors`` as {vector field: float32 rows}, one entry per model of the index,
        checked against the models and dimensions it holds; adds missing vector fields."""
        fields = self._model_fields() or {None: VECTOR_FIELD}
        if isinstance(vectors, dict) and any(fp not in fields for fp in vectors):
            if list(fields) == [None] and len(vectors) == 1:  # a model the index has not named
                vectors = next(iter(vectors.values()))
            else:
                for fp in vectors:
                    self._field_of(fp)  # re-reads the metadata once; raises naming the model
                fields = self._model_fields()
        if not isinstance(vectors, dict):
            if len(fields) > 1:
                raise BackendError(
                    f"this index holds vectors of {len(fields)} models: give each one's "
                    "(pass every --model the index was built with)"
                )
            vectors = {next(iter(fields)): vectors}
        missing = [fp for fp in fields if fp not in vectors]
        if missing:
            raise BackendError(
                f"this index also holds vectors of model {(missing[0] or '?')[:12]}: pass its "
                "--model too (every model the index holds gets a vector per question)"
            )
        blocks = {}
        for fp, field in fields.items():
            rows = np.asarray(vectors[fp], dtype=np.float32)
            if len(rows) != n:
                raise ValueError(f"{n} questions but {len(rows)} vectors")
            blocks[field] = rows
        self._ensure_vector_fields({f: (fp, int(blocks[f].shape[1])) for fp, f in fields.items()})
        return blocks

    def _ensure_vector_fields(self, wanted: dict[str, tuple[str | None, int]]) -> None:
        """Map the vector fields of ``wanted`` ({field: (fingerprint, dims)}) the index lacks;
        refuse dimensions other than the ones a mapped field has."""
        new = {}
        for field, (fingerprint, dims) in wanted.items():
            held = self._dims.get(field)
            if held is None:
                new[field] = self.settings.vector_mapping(dims)
            elif held != dims:
                model = f" for model {fingerprint[:12]}" if field != VECTOR_FIELD else ""
                raise BackendError(
                    f"vectors have {dims} dimensions but the index holds {held}{model}: "
                    "re-index with `qres --backend elasticsearch index --rebuild CORPUS`"
                )
        if new:
            self._client.indices.put_mapping(index=self._target, properties=new)
            self._dims.update({field: int(mapping["dims"]) for field, mapping in new.items()})
            if VECTOR_FIELD in new:
                self.set_metadata({"vector_dim": self._dims[VECTOR_FIELD]})

    @_guarded
    def add_models(self, models: Sequence[dict], encode) -> int:
        """Give every question that has a vector the vectors of further ``models``
        ({model_fingerprint, vector_dim, model_dir} each; ``encode(questions)`` returns
        ``{fingerprint: rows}``), each in its own ``vector_<fingerprint16>`` field.

        Questions are read in pages of the last committed state (sorted by id) and indexed
        again whole, their held vectors copied from ``_source`` (a partial update would
        lose the BM25 terms, which ``_source`` leaves out). The models are added to the
        metadata last, after a refresh: until then searches and writes use the models the
        index held, and an interrupted add leaves it holding those (a re-run adds the
        models again). Returns the number of questions encoded."""
        fields = self._model_fields()
        if not fields:
            raise BackendError("this index has no vectors to add a model's to: index with --model")
        if None in fields:
            raise BackendError(
                "this index does not name the model of its vectors: re-index it with "
                "`qres --backend elasticsearch index --rebuild CORPUS --model A --model B`"
            )
        for m in models:
            if m["model_fingerprint"] in fields:
                raise BackendError(f"the index holds model {m['model_fingerprint'][:12]} already")
        added, wanted = {}, {}  # fingerprint -> its new field; field -> (fingerprint, dims)
        for m in models:
            fp = m["model_fingerprint"]
            added[fp] = vector_field(fp, first=False)
            wanted[added[fp]] = (fp, int(m["vector_dim"]))
        self._ensure_vector_fields(wanted)
        encoded, after = 0, None
        while True:
            page = self._client.search(
                index=self._target,
                query={"bool": {"filter": [{"exists": {"field": f}} for f in fields.values()]}},
                sort=[{"id": "asc"}],
                search_after=after,
                size=self.bulk_docs,
                source=[*STORED_FIELDS, *fields.values()],
                track_total_hits=False,
            )["hits"]["hits"]
            if not page:
                break
            after = page[-1]["sort"]
            questions = [_question(hit["_id"], hit["_source"]) for hit in page]
            blocks = {
                field: np.array([hit["_source"].get(field) for hit in page], np.float32)
                for field in fields.values()
            }
            new = encode(questions)
            for fp, field in added.items():
                blocks[field] = np.asarray(new[fp], dtype=np.float32)
                if blocks[field].shape != (len(page), self._dims[field]):
                    raise BackendError(
                        f"model {fp[:12]} gave vectors of shape {blocks[field].shape} for "
                        f"{len(page)} questions; the index holds {self._dims[field]} dimensions"
                    )
            self._index(questions, blocks, "given the new models' vectors")
            encoded += len(page)
        self._client.indices.refresh(index=self._target)
        more = [*self._meta.get("more_models", []), *(dict(m) for m in models)]
        self.set_metadata({"more_models": more, "format": NEWEST_FORMAT})
        return encoded

    @_guarded
    def delete(self, ids: Sequence[str]) -> None:
        actions = ({"_op_type": "delete", "_index": self._target, "_id": qid} for qid in ids)
        self._bulk(actions, len(ids), "deleted")

    @_guarded
    def ids_not_in(self, ids: Collection[str]) -> list[str]:
        """Every id held is read, in pages sorted by id (a terms query of a forum's ids would
        pass the cluster's limit of 65,536 terms)."""
        named, missing, after = set(ids), [], None
        while True:
            page = self._client.search(
                index=self._target,
                query={"match_all": {}},
                sort=[{"id": "asc"}],
                search_after=after,
                size=ID_PAGE,
                source=False,
                track_total_hits=False,
            )["hits"]["hits"]
            if not page:
                return missing
            after = page[-1]["sort"]
            missing += [hit["_id"] for hit in page if hit["_id"] not in named]

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
            retry_on_status=BUSY,
            yield_ok=False,
        )
        try:
            for _, item in results:
                ((op, info),) = item.items()
                if op == "delete" and info.get("status") == 404 and "error" not in info:
                    continue  # deleting an unknown id is not an error
                failures.append((str(info.get("_id")), _bulk_reason(info)))
        except Exception as err:  # what ended the run, said with the refusals before it
            if not failures or isinstance(err, BackendError):
                raise
            refused = self._refused(failures, total, done)
            stopped = explain(err, self.config, self._target)
            raise BackendError(f"{stopped}; before that, {refused}") from None
        if failures:
            refused = self._refused(failures, total, done)
            raise BackendError(f"{refused}: fix them and run the command again")

    def _refused(self, failures: list[tuple[str, str]], total: int, done: str) -> str:
        shown = "; ".join(f"{qid} ({reason})" for qid, reason in failures[:5])
        more = f"; and {len(failures) - 5} more" if len(failures) > 5 else ""
        return self.config.scrub(
            f"{len(failures)} of {total} questions were not {done} in {self._target} at "
            f"{self.config.safe_url}: {shown}{more}"
        )

    @_guarded
    def commit(self) -> None:
        self._client.indices.refresh(index=self._target)

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
        sources = self._sources(ids, STORED_FIELDS)
        return {qid: _question(qid, source) for qid, source in sources.items()}

    @_guarded
    def vectors(
        self, ids: Sequence[str], model: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`Backend.vectors`; ``model``: the fingerprint of the model whose vectors
        to read, in an index of several (default: the first)."""
        field = self._field_of(model)
        dims = self._dims.get(field)
        if dims is None:
            return np.zeros((len(ids), 0), np.float32), np.zeros(len(ids), bool)
        out = np.zeros((len(ids), dims), np.float32)
        have = np.zeros(len(ids), bool)
        sources = self._sources(ids, [field])
        for row, qid in enumerate(ids):
            vector = sources.get(qid, {}).get(field)
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
        self._meta = meta

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
            "vector_fields": dict(self._dims),
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


def _question(qid: str, source: dict) -> Question:
    tags = source.get("tags") or ()
    tags = (tags,) if isinstance(tags, str) else tuple(tags)
    extras = source.get("extras")
    extras = extras if isinstance(extras, dict) else {}  # absent: written without any
    return Question(qid, source.get("title", ""), source.get("body", ""), tags, extras)


def _bulk_reason(info: dict) -> str:
    error = info.get("error")
    if isinstance(error, dict):
        return _short(_describe_error(error), 160)
    if error:
        return _short(str(error), 160)
    return f"HTTP {info.get('status')}"
