"""``qres serve``: the HTTP search service and the "similar questions" widget.

A FastAPI app over one backend and one encoder, both opened once per worker process:

* ``GET /search`` and ``POST /search`` run :class:`qres.ranking.search.SearchPipeline`;
* ``PUT /questions/{id}``, ``POST /questions`` (JSON lines) and ``DELETE /questions/{id}``
  go through :class:`qres.indexing.group_commit.GroupCommitWriter`: a write is answered
  only after the commit that holds it, so an acknowledged write is durable and already searchable;
* ``/healthz``, ``/readyz``, ``/metrics`` (Prometheus), ``/docs`` (OpenAPI);
* ``/`` (the demo forum's "ask a question" page) and ``/widget.js``.

Every GET route answers HEAD too (its headers alone), as HTTP asks.

Every error a client can cause is a 4xx with ``{"error": "one sentence"}``; anything else
is a 500 with no detail (the traceback stays in the server log). The web stack is imported
only by :mod:`qres.service`, so ``import qres`` and the other commands stay fast.

Beside this module: :mod:`~qres.service.config` (the options each worker gets),
:mod:`~qres.service.schemas` (request and response bodies, reading them),
:mod:`~qres.service.state` (what a worker holds: backend, pipeline, writer, metrics) and
:mod:`~qres.service.middleware` (body size limit, request counts).
"""

import asyncio
import contextlib
import hmac
import logging
import os
from contextlib import asynccontextmanager
from html import escape
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import swagger_ui
from fastapi import BackgroundTasks, Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BeforeValidator
from starlette.exceptions import HTTPException
from starlette.routing import Match

from qres.backends.base import BackendError, IndexBusy
from qres.corpus.readers import Question
from qres.encoders.model_set import model_set_of
from qres.indexing.group_commit import Delete
from qres.ranking.search import MODES
from qres.service.config import API_KEY_ENV, ServiceConfig, searches_at_once
from qres.service.middleware import BodyLimit, JsonCORSMiddleware, RequestMetrics
from qres.service.schemas import (
    ApiError,
    BatchOut,
    DeletedOut,
    HealthOut,
    QuestionIn,
    QuestionOut,
    ReadyOut,
    SearchBody,
    SearchOut,
    WrittenOut,
    answers,
    check_id,
    check_path_utf8,
    json_body,
    json_lines_body,
    one_sentence,
    parse_body,
    read_lines,
    whole_number_text,
)
from qres.service.state import Service
from qres.workers import ctrl_c_released

log = logging.getLogger("qres.serve")


def _static(name: str) -> str:
    return resources.files("qres").joinpath("static", name).read_text(encoding="utf-8")


WRITE_ERRORS = (400, 401, 403, 413, 503)
SWAGGER_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
CACHE_A_DAY = {"Cache-Control": "public, max-age=86400"}


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
    at_once = searches_at_once(config.workers) if service.backend.name == "embedded" else None
    searching = asyncio.Semaphore(at_once) if at_once else contextlib.nullcontext()

    def get(path: str, **options):
        """``app.get`` that answers HEAD too (FastAPI's routes, unlike Starlette's, do not);
        the HEAD twin stays out of the OpenAPI document."""

        def register(endpoint):
            app.head(path, **{**options, "include_in_schema": False})(endpoint)
            return app.get(path, **options)(endpoint)

        return register

    async def search_in_turn(*args) -> dict:
        # On an embedded index a search is CPU work: more at once than the worker's cores
        # only share them, each taking longer and the slowest far longer.
        async with searching:
            return await run_in_threadpool(service.search, *args)

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

    def check_query(text: str, title: str | None = None) -> None:
        """A query that is not empty, within the length limit (a whole question's title is
        held to it; its body to the body's own limit)."""
        if not text.strip():
            raise ApiError(400, "the query is empty: give the question's title.")
        what, limited = ("the query", text) if title is None else ("the title", title)
        if len(limited) > config.max_query_chars:
            raise ApiError(400, f"{what} is longer than {config.max_query_chars} characters.")

    def answer(result: dict, tasks: BackgroundTasks) -> dict:
        if config.log_queries:
            tasks.add_task(service.log_search, dict(result))
        result.pop("_results")
        return result

    # -- search --

    @get("/search", tags=["search"], response_model=None, responses=answers(SearchOut, 400, 503))
    async def search_get(
        tasks: BackgroundTasks,
        q: Annotated[str, Query(description="The text typed so far (a question title).")],
        k: Annotated[
            int,
            Query(ge=1, le=config.max_k, description="How many results."),
            BeforeValidator(whole_number_text),
        ] = 10,
        mode: Annotated[
            modes | None, Query(description="Default: hybrid when the index has vectors.")
        ] = None,
        explain: Annotated[
            bool, Query(description="Add each result's BM25 score and each model's cosine.")
        ] = False,
        typing: Annotated[
            bool,
            Query(
                description="The text is being typed: its last word, maybe unfinished, is "
                "completed from the titles of its best BM25 matches, or where they have none "
                "it starts, from the whole forum's titles (the widget sends it)."
            ),
        ] = False,
    ):
        """Similar questions for a short text: BM25 candidates rescored by the encoder."""
        check_query(q)
        return answer(await search_in_turn(q, "", k, mode, explain, typing), tasks)

    @app.post(
        "/search",
        tags=["search"],
        openapi_extra=json_body(SearchBody),
        responses=answers(SearchOut, 400, 413, 503),
    )
    async def search_post(request: Request, tasks: BackgroundTasks):
        """Similar questions for a whole question (title and body)."""
        query = parse_body(SearchBody, await request.body())
        check_query(f"{query.title} {query.body}", query.title)
        if query.k > config.max_k:
            raise ApiError(400, f"k: must be at most {config.max_k}.")
        result = await search_in_turn(query.title, query.body, query.k, query.mode, query.explain)
        return answer(result, tasks)

    # -- questions --

    @get(
        "/questions/{qid:question_id}",
        tags=["questions"],
        dependencies=[Depends(check_path_utf8)],
        responses=answers(QuestionOut, 400, 404, 503),
    )
    def get_question(qid: str):
        """A stored question."""
        qid = check_id(qid)
        found = service.backend.fetch([qid]).get(qid)
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
        "/questions/{qid:question_id}",
        tags=["questions"],
        dependencies=[Depends(require_key), Depends(check_path_utf8)],
        openapi_extra=json_body(QuestionIn),
        responses=answers(WrittenOut, *WRITE_ERRORS),
    )
    async def put_question(qid: str, request: Request):
        """Add or replace one question; answered once it is committed (durable, searchable)."""
        qid = check_id(qid)
        question = parse_body(QuestionIn, await request.body())
        if not (question.title.strip() or question.body.strip()):
            raise ApiError(400, "the question has an empty title and body.")
        await service.upsert(
            [
                Question(
                    qid,
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
        openapi_extra=json_lines_body(),
        responses=answers(BatchOut, *WRITE_ERRORS),
    )
    async def post_questions(request: Request):
        """Add or replace a batch: one JSON object {"id", "title", "body", "tags", "extras"}
        per line, or the lines of a JSONL corpus as indexed (answer_count, ... beside title)."""
        questions = read_lines(await request.body(), config.max_batch)
        await service.upsert(questions)
        return {"upserted": len(questions), "committed": True}

    @app.delete(
        "/questions/{qid:question_id}",
        tags=["questions"],
        dependencies=[Depends(require_key), Depends(check_path_utf8)],
        responses=answers(DeletedOut, *WRITE_ERRORS, 404),
    )
    async def delete_question(qid: str):
        """Remove one question; answered once the removal is committed."""
        qid = check_id(qid)
        found = await run_in_threadpool(service.backend.fetch, [qid])
        if qid not in found:
            raise ApiError(404, f"no question with id {qid!r}.")
        await service.write(Delete([qid]))
        return {"id": qid, "deleted": True, "committed": True}

    # -- operations --

    @get("/healthz", tags=["operations"], responses=answers(HealthOut))
    def healthz():
        """Liveness: the process answers."""
        return {"status": "ok"}

    @get("/readyz", tags=["operations"], responses=answers(ReadyOut, 503))
    def readyz():
        """Readiness: the index answers and every model is loaded."""
        questions = service.backend.count()  # BackendError (cluster down) → 503
        service.follow_the_models(now=True)  # rebuilt with other models: loaded, or a 503
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

    @get(
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

    @get("/", response_class=HTMLResponse, include_in_schema=False)
    def demo_page():
        link = escape(config.question_url or "", quote=True)  # none: suggestions are text
        return HTMLResponse(_static("index.html").replace("{question_url}", link))

    @get("/docs", include_in_schema=False)
    def docs():
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="qres API",
            swagger_js_url="/docs/swagger-ui-bundle.js",
            swagger_css_url="/docs/swagger-ui.css",
            swagger_favicon_url="/docs/favicon-32x32.png",
        )

    @get("/docs/{name}", include_in_schema=False)
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

    @get("/widget.js", include_in_schema=False)
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
            # every route of the path, not only the first one matched (one route a method)
            allowed = {m for r in app.router.routes if _same_path(r, request) for m in r.methods}
            headers = {"Allow": ", ".join(sorted(allowed))}
            return JSONResponse({"error": message}, 405, headers=headers)
        return JSONResponse({"error": message}, err.status_code, headers=err.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, err: RequestValidationError):
        errors = [  # loc without where it was sent (query, path, body)
            {**error, "loc": tuple(error.get("loc", ()))[1:]} for error in err.errors()
        ]
        return JSONResponse({"error": one_sentence(errors, "the request")}, 400)

    @app.exception_handler(BackendError)
    async def backend_error(_request: Request, err: BackendError):
        if isinstance(err, IndexBusy):  # a write while qres index or compact runs beside it
            log.warning("write refused: %s", err)
            busy = "another qres process (qres index or compact) is writing the index: try "
            headers = {"Retry-After": "10"}
            return JSONResponse({"error": busy + "this write again once it ends."}, 503, headers)
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
            JsonCORSMiddleware,
            allow_origins=config.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type"],
            max_age=600,
        )
    return app


def app_from_env() -> FastAPI:
    """The factory uvicorn calls in each worker process (options from ``$QRES_SERVE_CONFIG``)."""
    ctrl_c_released()  # born with it held (qres serve); uvicorn's handlers are in place now
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(name)s: %(message)s")
    return create_app(ServiceConfig.from_env())


def _same_path(route, request: Request) -> bool:
    """Whether ``route`` serves the path of ``request`` (whatever its method)."""
    if not getattr(route, "methods", None):
        return False
    match, _ = route.matches({**request.scope, "method": next(iter(route.methods))})
    return match == Match.FULL
