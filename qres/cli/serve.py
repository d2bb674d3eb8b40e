"""``qres serve``: the HTTP service and widget, with uvicorn."""

from __future__ import annotations

import os
import signal
import tempfile
from functools import partial
from pathlib import Path

import click

from qres.cli.group import (
    CommandError,
    Context,
    dense_candidates_option,
    index_fusion_option,
)
from qres.cli.search import candidates_option
from qres.workers import ctrl_c_held

# -- serve --------------------------------------------------------------------------------


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="TCP port."
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Worker processes, each with its own copy of the model. With the embedded backend, "
    "writes need --workers 1.",
)
@click.option(
    "--model",
    type=click.Path(file_okay=False, path_type=Path),
    help="Model directory [default: the one the index was built with].",
)
@index_fusion_option(exists=True)
@candidates_option
@dense_candidates_option
@click.option(
    "--max-k",
    default=100,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Largest k a search may ask for.",
)
@click.option(
    "--max-body-bytes",
    default=4 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(1024),
    help="Largest request body; bigger ones get 413.",
)
@click.option(
    "--max-batch",
    default=1000,
    show_default=True,
    type=click.IntRange(1),
    help="Questions per write request/commit.",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    help="A web origin allowed to call /search from a browser (repeatable), e.g. "
    "https://forum.example.org [default: $QRES_CORS_ORIGINS, comma-separated, or none].",
)
@click.option(
    "--log-queries",
    is_flag=True,
    help="Elasticsearch: record every search in qres-search-log for the Kibana dashboard.",
)
@click.option(
    "--open-writes",
    is_flag=True,
    help="Take writes without an API key; only with a loopback --host. Without it and without "
    "$QRES_API_KEY, writes are refused.",
)
@click.option(
    "--question-url",
    metavar="TEMPLATE",
    help="A question's page on your forum, {id} replaced, e.g. 'https://forum.example.org/q/{id}': "
    "the demo page links suggestions there and /search returns it as each result's url.",
)
@click.option(
    "--no-access-log",
    "access_log",
    flag_value=False,
    default=True,
    help="Do not log each request line (which holds the query text of GET /search).",
)
@click.pass_obj
def serve(
    obj: Context,
    host,
    port,
    workers,
    model,
    fusion,
    candidates,
    dense_candidates,
    max_k,
    max_body_bytes,
    max_batch,
    cors_origins,
    log_queries,
    open_writes,
    question_url,
    access_log,
):
    """Serve search, writes and the similar-questions widget over HTTP.

    Searches: GET /search?q=...&k=10, POST /search {"title", "body"}. Writes:
    PUT /questions/ID, POST /questions (JSON lines), DELETE /questions/ID; a write
    is answered once it is committed, so it is durable and searchable (concurrent
    writes share one commit). Writes need QRES_API_KEY set (the key in an X-API-Key
    header), or --open-writes on a loopback --host.
    Also /healthz, /readyz, /metrics, /docs, the demo page at / and /widget.js.

    \b
    Example:
      qres index qres/data/demo/questions.tsv --model-set minilm
      qres serve --port 8000        # then open http://127.0.0.1:8000/
      qres --index-dir ~/qres-travel serve --workers 2 \\
          --question-url "https://travel.stackexchange.com/q/{id}"
    """
    import logging

    import uvicorn

    from qres.ranking.completion import first_words
    from qres.service.app import create_app
    from qres.service.config import CONFIG_ENV, ServiceConfig, check_open_writes, startup_notes
    from qres.service.protocol import GuardedHttpTools
    from qres.service.state import Service

    if open_writes:
        check_open_writes(host)
    if question_url is not None and "{id}" not in question_url:
        raise click.BadParameter("the template needs {id}", param_hint="--question-url")
    _check_port_free(host, port)  # before the index and models are loaded

    if not cors_origins and os.environ.get("QRES_CORS_ORIGINS"):
        cors_origins = [o.strip() for o in os.environ["QRES_CORS_ORIGINS"].split(",") if o.strip()]
    config = ServiceConfig(
        index_dir=str(obj.index_dir),
        backend=obj.backend_name,
        model=str(model) if model else None,
        fusion=str(fusion) if fusion else None,
        candidates=candidates,
        dense_candidates=dense_candidates,
        max_k=max_k,
        max_body_bytes=max_body_bytes,
        max_batch=max_batch,
        log_queries=log_queries,
        cors_origins=list(cors_origins),
        workers=workers,
        open_writes=open_writes,
        question_url=question_url,
        device=obj.device,
    )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(name)s: %(message)s")
    service = Service(config)  # fails here, in one line, on a missing index or model
    log = logging.getLogger("qres.serve")
    for note in startup_notes(config, access_log, service.read_only):
        log.info(note)
    if not service.backend.completes_first_words:  # an index older than the titles' words
        log.warning("a first word being typed is %s", first_words(service.backend))
    # bounded request headers, JSON errors
    run = partial(uvicorn.run, host=host, port=port, access_log=access_log, http=GuardedHttpTools)
    if workers == 1:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # ends the server, as before qres took it
        run(create_app(config, service))
        return
    service.close()
    with tempfile.TemporaryDirectory(prefix="qres-metrics-") as metrics_dir:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # /metrics adds up the workers
        os.environ[CONFIG_ENV] = config.to_env()
        with ctrl_c_held(receiver=True):  # the workers uvicorn starts are born with it blocked
            run("qres.service.app:app_from_env", factory=True, workers=workers)


def _check_port_free(host: str, port: int) -> None:
    """Say in one line, before anything loads, that another program listens on the port
    (uvicorn would say so only after its start-up, and exit 3)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise CommandError(f"--host {host}: {err.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds it
        try:
            probe.bind(address)
        except OSError as err:
            raise CommandError(
                f"cannot listen on {host}:{port}: {err.strerror} (another server on that "
                "port? --port picks another)"
            ) from None
