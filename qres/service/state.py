"""What one worker process of the service holds: the backend, the search pipeline, the
writer and the Prometheus metrics."""

import asyncio
import logging
import os
import threading
import time
from urllib.parse import quote

from fastapi.concurrency import run_in_threadpool
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from qres.backends import open_backend
from qres.backends.base import BackendError, index_models
from qres.corpus.duplicate_links import names_originals
from qres.corpus.readers import Question
from qres.encoders.runtime import EncoderError
from qres.indexing.group_commit import Delete, GroupCommitWriter, Upsert
from qres.ranking.search import SearchPipeline, model_labels, search_log_record
from qres.service.config import ServiceConfig
from qres.service.schemas import ApiError

log = logging.getLogger("qres.serve")
MODELS_CHECKED_EVERY = 1.0  # seconds: the index's models read again (a request to a cluster)
REBUILT = "the index was rebuilt with other models since this server loaded its own"


class Metrics:
    def __init__(self):
        self.multiprocess = "PROMETHEUS_MULTIPROC_DIR" in os.environ
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "qres_http_requests",
            "HTTP requests answered.",
            ["route", "method", "status"],
            registry=r,
        )
        self.search_seconds = Histogram(
            "qres_search_seconds",
            "Time to answer a search (BM25, encoding, rescoring, titles), by mode.",
            ["mode"],
            buckets=(0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0),
            registry=r,
        )
        self.written = Counter(
            "qres_questions_written", "Questions upserted or deleted.", ["op"], registry=r
        )
        self.commit_seconds = Histogram(
            "qres_commit_seconds", "Time to apply and commit one group of writes.", registry=r
        )
        self.index_questions = Gauge(
            "qres_index_questions",
            "Questions visible to searches.",
            multiprocess_mode="mostrecent",
            registry=r,
        )

    def render(self) -> bytes:
        if self.multiprocess:  # every worker writes its own files; add them up
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)


class Service:
    """What one worker process holds: the backend, the search pipeline, the writer."""

    def __init__(self, config: ServiceConfig):
        self.config = config
        self.backend = open_backend(config.backend, config.index_dir)
        try:
            if config.log_queries and not self.backend.keeps_search_log:
                raise BackendError(
                    "--log-queries needs the Elasticsearch backend (--backend elasticsearch)"
                )
            held = self._index_fingerprints()
            self._use(self._pipeline(), held)
        except BaseException:
            self.backend.close()
            raise
        self._models_checked = time.monotonic()
        self._reloading = threading.Lock()
        self.metrics = Metrics()
        # Two processes cannot append to one embedded index: with several workers it is
        # searched by all of them and written by none (Elasticsearch takes writes anywhere).
        self.read_only = self.backend.name == "embedded" and config.workers > 1
        self.writer = GroupCommitWriter(self.backend, config.max_batch, self._committed)

    def _committed(self, n: int, seconds: float) -> None:
        self.metrics.commit_seconds.observe(seconds)

    def close(self) -> None:
        self.writer.close()
        self.backend.close()

    def _pipeline(self) -> SearchPipeline:
        config = self.config
        return SearchPipeline.for_index(
            self.backend,
            config.model,
            candidates=config.candidates,
            dense_candidates=config.dense_candidates,
            threads=1,  # requests run side by side: one onnxruntime thread each
            fusion=config.fusion,
            device=config.device,
        )

    def _use(self, pipeline: SearchPipeline, index_fingerprints: set[str]) -> None:
        """Search with ``pipeline``, loaded for the index's models ``index_fingerprints``
        (read before it was loaded: a rebuild meanwhile is followed at the next check)."""
        self.pipeline, self.encoder = pipeline, pipeline.encoder
        self.model_names = model_labels(pipeline.encoders)
        self.index_fingerprints = index_fingerprints
        self.default_mode = pipeline.mode

    def _index_fingerprints(self) -> set[str]:
        return {m["model_fingerprint"] for m in index_models(self.backend.metadata())}

    def follow_the_models(self, now: bool = False) -> None:
        """Load the index's models where it was rebuilt with others (or none) since this
        worker loaded its own, whose vectors no longer match (each search on an embedded
        index; at most every :data:`MODELS_CHECKED_EVERY` seconds on a cluster, unless
        ``now``). Where ``--model`` or ``--fusion`` chose them, or they cannot be loaded, the
        modes with vectors answer 503."""
        every = 0.0 if self.backend.metadata_is_local else MODELS_CHECKED_EVERY
        if not now and time.monotonic() - self._models_checked < every:
            return
        self._models_checked = time.monotonic()
        if self._index_fingerprints() == self.index_fingerprints:
            return
        with self._reloading:  # one request loads them; those beside it wait for them
            held = self._index_fingerprints()
            if held == self.index_fingerprints:
                return
            if self.config.model or self.config.fusion:
                raise ApiError(
                    503, f"{REBUILT}: restart it to search with them (mode=bm25 answers)."
                )
            try:
                pipeline = self._pipeline()
            except (BackendError, EncoderError) as err:
                log.warning("the index's new models could not be loaded: %s", err)
                raise ApiError(
                    503, f"{REBUILT}, and they cannot be loaded ({err}); mode=bm25 answers."
                ) from None
            follows = self.pipeline.follow_duplicates
            self._use(pipeline, held)
            self.pipeline.follow_duplicates |= follows  # links this worker wrote meanwhile
            log.info("the index was rebuilt: now searching with %s", self.model_names or "BM25")

    # -- searching ---------------------------------------------------------------------------

    def search(
        self, title: str, body: str, k: int, mode: str | None, explain: bool, typing: bool = False
    ) -> dict:
        try:
            self.follow_the_models()
        except ApiError:
            if mode != "bm25":  # BM25 answers whatever models the index holds
                raise
        mode = mode or self.default_mode
        if mode != "bm25" and self.encoder is None:
            raise ApiError(400, f"mode {mode} needs an index with vectors; this one has none.")
        started = time.perf_counter()
        vector = None
        if body and mode != "bm25":
            vectors = self._vectors([Question("query", title, body)])
            several = isinstance(vectors, dict)
            vector = {fp: v[0] for fp, v in vectors.items()} if several else vectors[0]
        text = f"{title} {body}".strip()
        try:
            if typing and vector is None:  # searched once where the last word stays as typed
                searched, results = self.pipeline.search_typed(text, k, mode)
            else:
                searched, results = text, self.pipeline.search(text, k, mode, query_vector=vector)
        except Exception:
            if mode != "bm25":  # the likeliest cause, said as such; else the error as it is
                self.follow_the_models(now=True)
            raise
        seconds = time.perf_counter() - started
        self.metrics.search_seconds.labels(mode).observe(seconds)
        hits = [self._hit(rank, r, explain) for rank, r in enumerate(results, 1)]
        return {
            "query": text,
            "searched": searched,
            "mode": mode,
            "k": k,
            "latency_ms": round(seconds * 1000, 3),
            "results": hits,
            "_results": results,  # for the search log; removed before answering
        }

    def _hit(self, rank: int, r, explain: bool) -> dict:
        hit = {"rank": rank, "id": r.id, "title": r.title, "score": round(r.score, 6)}
        hit.update(tags=list(r.tags), snippet=r.snippet)
        hit.update(answer_count=r.answer_count, extras=dict(r.extras))
        if r.via is not None:
            hit["via"] = r.via
        if self.config.question_url:
            hit["url"] = self.config.question_url.replace("{id}", quote(r.id, safe=""))
        if explain:
            hit["bm25"] = round(r.bm25, 6)
            hit["cosine"] = _round(r.cosine)
            each = r.cosines if len(self.model_names) > 1 else (r.cosine,)
            hit["cosines"] = {
                name: _round(None if each is None else each[j])
                for j, name in enumerate(self.model_names)
            }
        return hit

    def log_search(self, answer: dict) -> None:
        record = search_log_record(
            answer["query"],
            answer["mode"],
            answer["k"],
            answer["latency_ms"],
            answer["_results"],
            self.backend,
        )
        try:
            self.backend.log_search(record)
        except BackendError as err:  # analytics must never fail the search itself
            log.warning("search not logged: %s", err)

    # -- writing -----------------------------------------------------------------------------

    async def write(self, op: Upsert | Delete) -> None:
        if self.read_only:
            raise ApiError(
                503,
                "this server runs several workers over an embedded index, which takes writes "
                "only with --workers 1; write through a single-worker server.",
            )
        await asyncio.wrap_future(self.writer.submit(op))
        self.metrics.written.labels("upsert" if isinstance(op, Upsert) else "delete").inc(
            len(op.questions) if isinstance(op, Upsert) else len(op.ids)
        )

    def _vectors(self, questions: list[Question]):
        """The questions' vectors: an array, or ``{fingerprint: array}`` for an index of
        several models."""
        encoders = self.pipeline.encoders
        if len(encoders) > 1:
            return {e.fingerprint: e.encode_questions(questions) for e in encoders}
        return self.encoder.encode_questions(questions)

    async def upsert(self, questions: list[Question]) -> None:
        vectors = None
        if self.encoder is not None:
            vectors = await run_in_threadpool(self._vectors, questions)
        await self.write(Upsert(questions, vectors))
        if names_originals(questions):  # this worker's searches follow them from now on
            self.pipeline.follow_duplicates = True


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
