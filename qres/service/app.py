"""``qres serve``: the HTTP search service and the "similar questions" widget.

A FastAPI app over one backend and one encoder, both opened once per worker process:

* ``GET /search`` and ``POST /search`` run :class:`qres.ranking.search.SearchPipeline`;
* ``PUT /questions/{id}``, ``POST /questions`` (JSON lines) and ``DELETE /questions/{id}``
  go through :class:`qres.indexing.group_commit.GroupCommitWriter`: a write is answered only after
  the
  commit that holds it, so an acknowledged write is durable and already searchable;
* ``/healthz``, ``/readyz``, ``/metrics`` (Prometheus), ``/docs`` (OpenAPI);
* ``/`` (the demo forum's "ask a question" page) and ``/widget.js``.

Every error a client can cause is a 4xx with ``{"error": "one sentence"}``; anything else
is a 500 with no detail (the traceback stays in the server log). The web stack is imported
only here, so ``import qres`` and the other commands stay fast.
"""

import asyncio
import hmac
import json
import logging
import os
import time
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from html import escape
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote

import swagger_ui
from fastapi import BackgroundTasks, Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException
from starlette.routing import Match

from qres.backends import open_backend
from qres.backends.base import BackendError
from qres.corpus.readers import MAX_FIELD_CHARS, Question, extras_of
from qres.encoders.model_set import model_set_of
from qres.indexing.group_commit import Delete, GroupCommitWriter, Upsert
from qres.ranking.search import MODES, SearchPipeline, model_labels, search_log_record

log = logging.getLogger("qres.serve")

CONFIG_ENV = "QRES_SERVE_CONFIG"  # how `qres serve` hands its options to worker processes
API_KEY_ENV = "QRES_API_KEY"
MAX_ID_CHARS = 512


@dataclass
class ServiceConfig:
    index_dir: str
    backend: str | None = None
    model: str | None = None  # default: the model the index was built with
    fusion: str | None = None  # a fusion file (default: the model's, or equal weights)
    candidates: int = 100
    max_k: int = 100
    max_query_chars: int = 2000
    max_body_bytes: int = 4 * 1024 * 1024
    max_batch: int = 1000  # questions per POST /questions and per commit
    log_queries: bool = False
    cors_origins: list[str] = field(default_factory=list)
    workers: int = 1
    open_writes: bool = False  # writes without QRES_API_KEY (the CLI allows it on loopback only)
    question_url: str | None = None  # a question's page on the forum, "{id}" replaced

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> "ServiceConfig":
        return cls(**json.loads(os.environ[CONFIG_ENV]))


class ApiError(HTTPException):
    """A client's mistake: its status code and one sentence."""


# -- request and response bodies -------------------------------------------------------------


def _extras(value):
    """A question's extras checked as the corpus readers check them (an object's only)."""
    return extras_of(value) if isinstance(value, dict) else value


class QuestionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(max_length=MAX_FIELD_CHARS)
    body: str = Field(default="", max_length=MAX_FIELD_CHARS)
    tags: list[str] = Field(default_factory=list, max_length=100)
    extras: Annotated[dict[str, int | str], BeforeValidator(_extras)] = Field(
        default_factory=dict,
        description="What the forum shows beside the question, stored, never searched: "
        "answer_count, score (whole numbers), accepted_answer_id, closed_date, or others.",
    )


class QuestionLine(QuestionIn):
    id: str = Field(min_length=1, max_length=MAX_ID_CHARS)


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(max_length=MAX_FIELD_CHARS, description="The question's title.")
    body: str = Field(default="", max_length=MAX_FIELD_CHARS, description="Its text, if any.")
    k: int = Field(default=10, ge=1)
    mode: Literal[MODES] | None = None
    explain: bool = False


class ErrorOut(BaseModel):
    error: str = Field(description="One sentence saying what is wrong.")


class HitOut(BaseModel):
    rank: int
    id: str
    title: str
    score: float = Field(description="The ranking score (fused in hybrid mode).")
    tags: list[str]
    snippet: str = Field(description="The question's body, its first words.")
    answer_count: int | None = Field(
        description="How many answers the question has, where the index holds it (null: not known)."
    )
    extras: dict[str, int | str] = Field(
        description="What the forum shows beside the question, as indexed (a StackExchange "
        "dump's score, answer_count, accepted_answer_id, closed_date); empty if none."
    )
    url: str | None = Field(
        default=None, description="The question's page (with `qres serve --question-url`)."
    )
    bm25: float | None = Field(default=None, description="With explain: the BM25 score.")
    cosine: float | None = Field(
        default=None, description="With explain: the cosine (the mean over models, if several)."
    )
    cosines: dict[str, float | None] | None = Field(
        default=None, description="With explain: each model's cosine, by model name."
    )


class SearchOut(BaseModel):
    query: str
    mode: Literal[MODES]
    k: int
    latency_ms: float
    results: list[HitOut]


class QuestionOut(BaseModel):
    id: str
    title: str
    body: str
    tags: list[str]
    extras: dict[str, int | str] = Field(description="Stored display fields; empty if none.")


class WrittenOut(BaseModel):
    id: str
    committed: bool


class BatchOut(BaseModel):
    upserted: int
    committed: bool


class DeletedOut(BaseModel):
    id: str
    deleted: bool
    committed: bool


class HealthOut(BaseModel):
    status: Literal["ok"]


class ModelOut(BaseModel):
    name: str
    fingerprint: str


class ReadyOut(BaseModel):
    status: Literal["ready"]
    backend: str
    questions: int
    models: list[ModelOut] = Field(description="Every model of the index, in fusion order.")
    model_set: str | None = Field(description="The model set the models make, if any.")
    default_mode: Literal[MODES]
    writes: bool = Field(description="Whether this server takes writes.")


def _errors(*codes: int) -> dict:
    """OpenAPI ``responses`` for the errors a route can answer, all ``{"error": ...}``."""
    said = {
        400: "A bad request (one sentence says what).",
        401: "A missing or wrong API key.",
        403: "Writes are off: the server was started without QRES_API_KEY.",
        404: "No question with that id.",
        413: "The body or batch is too large.",
        500: "An unexpected failure (details in the server's log).",
        503: "The index cannot be reached, or this server takes no writes.",
    }
    return {code: {"model": ErrorOut, "description": said[code]} for code in (*codes, 500)}


# -- the service: backend, model, writer, metrics ----------------------------------------------


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
            # requests run side by side: one onnxruntime thread each
            self.pipeline = SearchPipeline.for_index(
                self.backend,
                config.model,
                candidates=config.candidates,
                threads=1,
                fusion=config.fusion,
            )
        except BaseException:
            self.backend.close()
            raise
        self.encoder = self.pipeline.encoder
        self.model_names = model_labels(self.pipeline.encoders)
        self.default_mode = self.pipeline.mode
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

    # -- searching ---------------------------------------------------------------------------

    def search(self, title: str, body: str, k: int, mode: str | None, explain: bool) -> dict:
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
        results = self.pipeline.search(text, k, mode, query_vector=vector)
        seconds = time.perf_counter() - started
        self.metrics.search_seconds.labels(mode).observe(seconds)
        hits = [self._hit(rank, r, explain) for rank, r in enumerate(results, 1)]
        return {
            "query": text,
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


# -- the app -----------------------------------------------------------------------------------


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _static(name: str) -> str:
    return resources.files("qres").joinpath("static", name).read_text(encoding="utf-8")


def _sentence(errors: list[dict], what: str = "the request body") -> str:
    """The first validation problem as one sentence, e.g. "k: input should be ... 100."."""
    first = errors[0]
    where = ".".join(
        str(part) for part in first.get("loc", ()) if part not in ("query", "body", "path")
    )
    kind, message = first.get("type"), first.get("msg", "invalid value")
    if kind == "json_invalid":
        return f"{what} is not valid JSON."
    if kind in ("model_type", "model_attributes_type", "dict_type") and not where:
        return f"{what} must be a JSON object."
    if kind == "missing":
        return f"{where or what} is required."
    return f"{where or what}: {message[0].lower() + message[1:]}."


def _parse(model: type[BaseModel], raw: bytes | str, what: str = "the request body"):
    """``raw`` JSON as ``model``, or a 400 saying what is wrong with it."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as err:
        raise ApiError(400, _sentence(err.errors(), what)) from None


WRITE_ERRORS = (400, 401, 403, 413, 503)
SWAGGER_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
CACHE_A_DAY = {"Cache-Control": "public, max-age=86400"}


def _ok(model: type[BaseModel], *errors: int) -> dict:
    """OpenAPI ``responses``: ``model`` for 200, ``{"error": ...}`` for each error code."""
    return {200: {"model": model}, **_errors(*errors)}


def _json_lines_body() -> dict:
    """OpenAPI for POST /questions: JSON lines, each a question with its id."""
    line = QuestionLine.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "description": "One JSON object a line, each as the schema says (JSON lines).",
            "content": {
                "application/x-ndjson": {"schema": {"type": "string"}, "example": EXAMPLE_LINES},
                "application/json": {"schema": line},
            },
        }
    }


EXAMPLE_LINES = (
    '{"id": "q43", "title": "Wifi drops every hour", "tags": ["wifi"]}\n'
    '{"id": "q44", "title": "No sound over HDMI"}\n'
)


def _json_body(model: type[BaseModel]) -> dict:
    """OpenAPI for a JSON body the endpoint parses itself (whatever its Content-Type)."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _check_id(qid: str) -> str:
    if not qid.strip() or len(qid) > MAX_ID_CHARS:
        raise ApiError(400, f"a question id is 1 to {MAX_ID_CHARS} characters.")
    return qid


def create_app(config: ServiceConfig, service: Service | None = None) -> FastAPI:
    """The app for ``config``; ``service`` (already opened) is used instead of opening one."""
    service = service or Service(config)
    api_key = os.environ.get(API_KEY_ENV) or None

    @asynccontextmanager
    async def lifespan(_app):
        yield
        await run_in_threadpool(service.close)

    app = FastAPI(
        title="qres",
        version="0.1.0",
        summary="Find the forum questions already asked that mean the same as a new one.",
        lifespan=lifespan,
        docs_url=None,  # served below from the package's own Swagger UI files (no CDN)
        redoc_url=None,
    )
    app.state.service = service
    modes = Literal[MODES]

    def require_key(request: Request) -> None:
        if api_key is None:
            if config.open_writes:
                return
            raise ApiError(
                403,
                f"writes are off: start the server with {API_KEY_ENV} set (or, on a loopback "
                "address only, with --open-writes).",
            )
        given = request.headers.get("x-api-key") or ""
        bearer = request.headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            given = bearer[7:].strip()
        if not hmac.compare_digest(given.encode(), api_key.encode()):
            raise ApiError(401, "this endpoint needs the API key (header 'X-API-Key: KEY').")

    def check_query(text: str) -> None:
        if not text.strip():
            raise ApiError(400, "the query is empty: give the question's title.")
        if len(text) > config.max_query_chars:
            raise ApiError(400, f"the query is longer than {config.max_query_chars} characters.")

    def answer(result: dict, tasks: BackgroundTasks) -> dict:
        if config.log_queries:
            tasks.add_task(service.log_search, dict(result))
        result.pop("_results")
        return result

    # -- search --

    @app.get("/search", tags=["search"], response_model=None, responses=_ok(SearchOut, 400, 503))
    def search_get(
        tasks: BackgroundTasks,
        q: Annotated[str, Query(description="The text typed so far (a question title).")],
        k: Annotated[int, Query(ge=1, le=config.max_k, description="How many results.")] = 10,
        mode: Annotated[
            modes | None, Query(description="Default: hybrid when the index has vectors.")
        ] = None,
        explain: Annotated[
            bool, Query(description="Add each result's BM25 score and each model's cosine.")
        ] = False,
    ):
        """Similar questions for a short text: BM25 candidates rescored by the encoder."""
        check_query(q)
        return answer(service.search(q, "", k, mode, explain), tasks)

    @app.post(
        "/search",
        tags=["search"],
        openapi_extra=_json_body(SearchBody),
        responses=_ok(SearchOut, 400, 413, 503),
    )
    async def search_post(request: Request, tasks: BackgroundTasks):
        """Similar questions for a whole question (title and body)."""
        query = _parse(SearchBody, await request.body())
        check_query(f"{query.title} {query.body}")
        if query.k > config.max_k:
            raise ApiError(400, f"k: must be at most {config.max_k}.")
        result = await run_in_threadpool(
            service.search, query.title, query.body, query.k, query.mode, query.explain
        )
        return answer(result, tasks)

    # -- questions --

    @app.get("/questions/{qid}", tags=["questions"], responses=_ok(QuestionOut, 400, 404, 503))
    def get_question(qid: str):
        """A stored question."""
        found = service.backend.fetch([_check_id(qid)]).get(qid)
        if found is None:
            raise ApiError(404, f"no question with id {qid!r}.")
        return {
            "id": found.id,
            "title": found.title,
            "body": found.body,
            "tags": found.tags,
            "extras": dict(found.extras),
        }

    @app.put(
        "/questions/{qid}",
        tags=["questions"],
        dependencies=[Depends(require_key)],
        openapi_extra=_json_body(QuestionIn),
        responses=_ok(WrittenOut, *WRITE_ERRORS),
    )
    async def put_question(qid: str, request: Request):
        """Add or replace one question; answered once it is committed (durable, searchable)."""
        question = _parse(QuestionIn, await request.body())
        if not (question.title.strip() or question.body.strip()):
            raise ApiError(400, "the question has an empty title and body.")
        await service.upsert(
            [
                Question(
                    _check_id(qid),
                    question.title,
                    question.body,
                    tuple(question.tags),
                    question.extras,
                )
            ]
        )
        return {"id": qid, "committed": True}

    @app.post(
        "/questions",
        tags=["questions"],
        dependencies=[Depends(require_key)],
        openapi_extra=_json_lines_body(),
        responses=_ok(BatchOut, *WRITE_ERRORS),
    )
    async def post_questions(request: Request):
        """Add or replace a batch: one JSON object {"id", "title", "body", "tags", "extras"}
        per line."""
        questions = _read_lines(await request.body(), config.max_batch)
        await service.upsert(questions)
        return {"upserted": len(questions), "committed": True}

    @app.delete(
        "/questions/{qid}",
        tags=["questions"],
        dependencies=[Depends(require_key)],
        responses=_ok(DeletedOut, *WRITE_ERRORS, 404),
    )
    async def delete_question(qid: str):
        """Remove one question; answered once the removal is committed."""
        found = await run_in_threadpool(service.backend.fetch, [_check_id(qid)])
        if qid not in found:
            raise ApiError(404, f"no question with id {qid!r}.")
        await service.write(Delete([qid]))
        return {"id": qid, "deleted": True, "committed": True}

    # -- operations --

    @app.get("/healthz", tags=["operations"], responses=_ok(HealthOut))
    def healthz():
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"], responses=_ok(ReadyOut, 503))
    def readyz():
        """Readiness: the index answers and every model is loaded."""
        questions = service.backend.count()  # BackendError (cluster down) → 503
        encoders = service.pipeline.encoders
        models = [
            {"name": name, "fingerprint": e.fingerprint}
            for name, e in zip(service.model_names, encoders, strict=True)
        ]
        return {
            "status": "ready",
            "backend": service.backend.name,
            "questions": questions,
            "models": models,
            "model_set": model_set_of([e.fingerprint for e in encoders]),
            "default_mode": service.default_mode,
            "writes": not service.read_only and (api_key is not None or config.open_writes),
        }

    @app.get(
        "/metrics",
        tags=["operations"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    def metrics():
        """Prometheus text format: requests, search latency by mode, writes, index size."""
        try:
            service.metrics.index_questions.set(service.backend.count())
        except BackendError as err:
            log.warning("index size not measured: %s", err)
        return Response(service.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    # -- the widget --

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def demo_page():
        link = escape(config.question_url or "", quote=True)  # none: suggestions are text
        return HTMLResponse(_static("index.html").replace("{question_url}", link))

    @app.get("/docs", include_in_schema=False)
    def docs():
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="qres API",
            swagger_js_url="/docs/swagger-ui-bundle.js",
            swagger_css_url="/docs/swagger-ui.css",
            swagger_favicon_url="/docs/favicon-32x32.png",
        )

    @app.get("/docs/{name}", include_in_schema=False)
    def docs_asset(name: str):
        if name not in SWAGGER_ASSETS:
            raise HTTPException(404)
        path = Path(swagger_ui.__file__).parent / "static" / name
        media = SWAGGER_ASSETS[name]
        return Response(path.read_bytes(), media_type=media, headers=CACHE_A_DAY)

    def openapi():
        """FastAPI's document, less the 422 answers this service never gives (a bad
        request is a 400 with one sentence, as the routes declare)."""
        if app.openapi_schema is None:
            spec = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            for route in spec["paths"].values():
                for operation in route.values():
                    operation["responses"].pop("422", None)
            schemas = spec.get("components", {}).get("schemas", {})
            for unused in ("HTTPValidationError", "ValidationError"):
                schemas.pop(unused, None)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi

    @app.get("/widget.js", include_in_schema=False)
    def widget():
        return Response(
            _static("widget.js"),
            media_type="text/javascript; charset=utf-8",
            headers={"Cache-Control": "public, max-age=300"},
        )

    # -- errors: one sentence of JSON, never a traceback --

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        message = err.detail
        if err.status_code == 404 and not isinstance(err, ApiError):
            message = f"no such endpoint: {request.method} {request.url.path}."
        elif err.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}."
        return JSONResponse({"error": message}, err.status_code, headers=err.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, err: RequestValidationError):
        return JSONResponse({"error": _sentence(err.errors(), "the request")}, 400)

    @app.exception_handler(BackendError)
    async def backend_error(_request: Request, err: BackendError):
        log.error("backend error: %s", err)
        return JSONResponse({"error": f"the index is unavailable: {err}"}, 503)

    @app.exception_handler(Exception)
    async def internal_error(_request: Request, err: Exception):
        log.exception("unexpected error", exc_info=err)
        return JSONResponse({"error": "internal error; the server log has the details."}, 500)

    app.add_middleware(RequestMetrics, metrics=service.metrics, routes=app.router.routes)
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    if config.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=config.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type"],
            max_age=600,
        )
    return app


def _read_lines(raw: bytes, max_questions: int) -> list[Question]:
    """The questions of a JSON-lines body; the first bad line is a 400 naming it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "the body is not UTF-8 text.") from None
    questions: dict[str, Question] = {}  # a repeated id keeps its last version
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = _parse(QuestionLine, line, "the line")
        except ApiError as err:
            raise ApiError(400, f"line {n}: {err.detail}") from None
        if not (item.title.strip() or item.body.strip()):
            raise ApiError(400, f"line {n}: question {item.id!r} has an empty title and body.")
        questions[item.id] = Question(item.id, item.title, item.body, tuple(item.tags), item.extras)
        if len(questions) > max_questions:
            raise ApiError(413, f"more than {max_questions} questions in one request.")
    if not questions:
        raise ApiError(400, "the body holds no questions: send one JSON object per line.")
    return list(questions.values())


# -- ASGI middleware -------------------------------------------------------------------------


async def _send_error(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuse a request body over ``limit`` bytes with 413, declared or streamed."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        too_big = f"the request body is larger than {self.limit} bytes."
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await _send_error(send, 413, too_big)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await _send_error(send, 413, too_big)
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class RequestMetrics:
    """Count every answered request by route template, method and status."""

    def __init__(self, app, metrics: Metrics, routes):
        self.app, self.metrics, self.routes = app, metrics, routes

    def route_of(self, scope) -> str:
        """The template of the route that answered ("/questions/{qid}"), "unmatched" if none."""
        route = scope.get("route")
        if route is None:  # routes added by the framework itself set no scope["route"]
            route = next((r for r in self.routes if r.matches(scope)[0] == Match.FULL), None)
        return getattr(route, "path", "unmatched")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = 500

        async def watch(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            self.metrics.requests.labels(self.route_of(scope), scope["method"], str(status)).inc()


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def check_open_writes(host: str) -> None:
    """``--open-writes`` is for a server only this machine can reach."""
    if not (host in LOOPBACK or host.startswith("127.")):
        raise BackendError(
            f"--open-writes lets anyone who reaches {host} change the index: it is allowed on a "
            f"loopback --host only ({', '.join(LOOPBACK)}); set {API_KEY_ENV} instead"
        )


def startup_notes(config: ServiceConfig, access_log: bool) -> list[str]:
    """What an operator should know before the first request: who may write, what is logged."""
    if os.environ.get(API_KEY_ENV):
        writes = f"writes need the API key in {API_KEY_ENV} (header X-API-Key or Bearer)"
    elif config.open_writes:
        writes = "writes are open to anyone who can reach this address (--open-writes)"
    else:
        writes = f"writes are off: set {API_KEY_ENV} to take PUT/POST/DELETE /questions"
    if access_log:
        logged = "the access log records every request line, query texts included (--no-access-log)"
    else:
        logged = "the access log is off: query texts are not logged"
    return [writes, logged]


def app_from_env() -> FastAPI:
    """The factory uvicorn calls in each worker process (options from ``$QRES_SERVE_CONFIG``)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(name)s: %(message)s")
    return create_app(ServiceConfig.from_env())
