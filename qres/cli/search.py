"""``qres search``: one query through the production search path, as a table or JSON."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich import box
from rich.table import Table
from rich.text import Text

from qres.backends.base import Backend, BackendError
from qres.cli.given_options import refuse_given
from qres.cli.group import (
    Context,
    console,
    dense_candidates_option,
    index_fusion_option,
    json_option,
    stdout,
)

# -- search -------------------------------------------------------------------------------


def candidates_option(command):
    """``--candidates N``: BM25's candidates a search rescores (search and serve)."""
    return click.option(
        "--candidates",
        default=100,
        show_default=True,
        type=click.IntRange(min=1),
        help="BM25 candidates to rescore.",
    )(command)


@click.command()
@json_option
@click.argument("text", nargs=-1, required=True)
@click.option(
    "-k", "--k", default=10, show_default=True, type=click.IntRange(min=1), help="How many results."
)
@click.option(
    "--mode",
    type=click.Choice(["bm25", "dense", "hybrid"]),
    default=None,
    help="bm25 alone, or the candidates (BM25's and the nearest by vector) re-ordered by "
    "cosine (dense) or by the fused score (hybrid) [default: hybrid when the index has "
    "vectors, else bm25].",
)
@click.option(
    "--model",
    type=click.Path(file_okay=False, path_type=Path),
    help="Model directory [default: the one(s) the index was built with].",
)
@index_fusion_option(exists=False)
@candidates_option
@dense_candidates_option
@click.option("--explain", is_flag=True, help="Show each result's BM25, cosine(s) and fused score.")
@click.option(
    "--keep-duplicates",
    is_flag=True,
    help="Show a question closed as a duplicate as itself [default: its original in its "
    'place, marked "via" it, where the index holds the forum\'s duplicate links].',
)
@click.option(
    "--typing",
    is_flag=True,
    help="TEXT is being typed, as a widget sends it: its last word, maybe unfinished "
    '("boot from us"), is completed from the titles of its best BM25 matches first '
    "(where they have none it starts, from the whole forum's titles).",
)
@click.option(
    "--log-queries",
    is_flag=True,
    help="Elasticsearch: record the search (query, mode, latency, top ids) in qres-search-log "
    "for the Kibana dashboard.",
)
@click.pass_obj
def search(
    obj: Context,
    text,
    k,
    mode,
    model,
    fusion,
    candidates,
    dense_candidates,
    explain,
    keep_duplicates,
    typing,
    log_queries,
):
    """Find the indexed questions most like TEXT.

    TEXT is taken as plain words, quoted or not: quotes, field:value, AND/OR and
    wildcards are searched as text, never as query syntax.

    \b
    Examples:
      qres search "boot ubuntu from usb" -k 5 --explain
      qres search "boot ubuntu from us" --typing
    """
    from qres.ranking.search import SearchPipeline, model_labels, snippet

    text = " ".join(text)
    if not text.strip():
        raise click.UsageError("the query is empty: give the question's title")

    with obj.open() as backend:
        if log_queries and not backend.keeps_search_log:
            raise BackendError(
                "--log-queries needs the Elasticsearch backend (--backend elasticsearch)"
            )
        pipeline = SearchPipeline.for_index(
            backend,
            model,
            mode,
            candidates,
            device=obj.device,
            fusion=fusion,
            dense_candidates=dense_candidates,
        )
        if pipeline.mode == "bm25":
            why = "nothing is rescored in bm25 mode (--mode, or an index without vectors)"
            refuse_given("fusion", "candidates", "dense_candidates", why=why)
        pipeline.follow_duplicates &= not keep_duplicates
        signals = model_labels(pipeline.encoders)
        mode = pipeline.mode
        started = time.perf_counter()
        if typing:
            searched, results = pipeline.search_typed(text, k, mode)
        else:
            searched, results = text, pipeline.search(text, k, mode)
        latency_ms = (time.perf_counter() - started) * 1000
        held = backend.count() if not results else None
        if log_queries:
            _log_search(backend, text, mode, k, latency_ms, results)
    several = len(signals) > 1
    if obj.as_json:
        obj.emit(
            {
                "query": text,
                "searched": searched,
                "mode": mode,
                "latency_ms": round(latency_ms, 2),
                "models": signals,
                "results": [_json_result(i, r, signals) for i, r in enumerate(results, 1)],
            }
        )
        return
    if not results and held == 0:
        console.print("no results: the index holds no questions yet (qres info says where it is)")
        return
    if not results:
        console.print("no results: the query has no searchable words, or nothing matched")
        return
    # Queries, ids and titles are shown as written: "[/b]" in one is text, not rich markup.
    table = Table(
        title=Text(f"{_shown_query(text, searched, snippet)} — {mode}, {latency_ms:.1f} ms"),
        title_justify="left",
        box=box.SIMPLE_HEAD,  # no side borders: the title column keeps the width
        show_edge=False,
    )
    cosines = [f"cos {s}" for s in signals] if signals else []
    numbers = ["score"] + (["bm25", *cosines] if explain else [])
    # A forum's answer counts (an index may hold none: then no column; "-": not known).
    answers = any(r.answer_count is not None for r in results)
    numbers += ["answers"] if answers else []
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("id", overflow="ellipsis", max_width=12)
    for column in numbers:  # a header may wrap between its words ("cos" / "minilm")
        table.add_column(column, justify="right", min_width=5)
    # Titles wrap between words; a word wider than the column ends in "…", never folds.
    table.add_column("title", overflow="ellipsis", min_width=16)
    for i, r in enumerate(results, 1):
        extra = []
        if explain:
            each = r.cosines if several else ((r.cosine,) if signals else ())  # bm25: none
            shown = ["-" if c is None else f"{c:.3f}" for c in each or [None] * len(cosines)]
            extra = [f"{r.bm25:.2f}", *shown]
        if answers:
            extra.append("-" if r.answer_count is None else str(r.answer_count))
        title = Text(r.title)
        if r.via is not None:
            title.append(f" (via {r.via}, closed as its duplicate)", style="dim")
        table.add_row(str(i), Text(r.id), f"{r.score:.3f}", *extra, title)
    stdout.print(table)


def _json_result(rank: int, r, signals: list[str]) -> dict:
    """A result for --json: every cosine named by its model (null: no vector, or bm25)."""
    out = {"rank": rank, "id": r.id, "score": r.score, "bm25": r.bm25, "cosine": r.cosine}
    each = r.cosines if len(signals) > 1 else (r.cosine,)
    out["cosines"] = {s: (None if each is None else each[j]) for j, s in enumerate(signals)}
    out.update(title=r.title, tags=list(r.tags), snippet=r.snippet)
    out.update(answer_count=r.answer_count, extras=dict(r.extras), via=r.via)
    return out


def _log_search(backend: Backend, text, mode, k, latency_ms, results) -> None:
    from qres.ranking.search import search_log_record

    record = search_log_record(text, mode, k, latency_ms, results, backend)
    try:
        backend.log_search(record)
    except BackendError as err:  # analytics must never fail the search itself
        console.print(f"warning: search not logged: {err}", highlight=False)


def _shown_query(typed: str, searched: str, snippet) -> str:
    """The query as searched (cut by ``snippet``), and as typed where completing its last word
    changed it."""
    shown = repr(snippet(searched, 120))
    return shown if searched == typed else f"{snippet(typed, 120)!r} → {shown}"
