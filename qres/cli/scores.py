"""What ``qres evaluate`` and ``qres compare-runs`` share: the --dataset and --split options,
and how they print scores (the metric table, the significance of a difference)."""

from __future__ import annotations

from dataclasses import asdict

import click
from rich.table import Table

from qres.cli.group import console, stdout


def dataset_options(command):
    """--dataset and --split, as evaluate and compare-runs take them."""
    splits = click.Choice(["dev", "test", "train", "all"])
    command = click.option(
        "--split",
        type=splits,
        help="The queries scored [default: dev; all for --dataset stackexchange, whose splits "
        "are by time: train the oldest 80% of its duplicates, test the newest 20%].",
    )(command)
    datasets = click.Choice(["askubuntu", "semeval2016", "android", "stackexchange"])
    return click.option(
        "--dataset",
        type=datasets,
        required=True,
        help="The benchmark: AskUbuntu or Android (Lei et al.), SemEval-2016 Task 3 subtask B, "
        "or a StackExchange dump's duplicates searching the whole forum (--data-dir its folder).",
    )(command)


def with_comparison(summaries: list[dict], comparison) -> dict:
    return {"evaluations": summaries, "comparison": asdict(comparison)}


def print_comparison(c, dataset: str) -> None:
    d = 2 if dataset in ("semeval2016", "stackexchange") else 1
    measure = "nDCG@10" if dataset == "stackexchange" else "MAP"
    stdout.print(
        f"{c.b} - {c.a}: {measure} {c.difference:+.{d}f} ({c.map_b:.{d}f} vs {c.map_a:.{d}f}, "
        f"{c.queries} queries)\n"
        f"  paired bootstrap 95% interval [{c.ci_low:+.{d}f}, {c.ci_high:+.{d}f}]\n"
        f"  paired randomization test p = {c.p_value:.4f} "
        f"({c.resamples} resamples, seed {c.seed})",
        highlight=False,
        soft_wrap=True,
    )


def print_evaluations(dataset, split, evaluations, accuracy_at, per_query) -> None:
    from qres.evaluation import runner as ev

    # The precision each benchmark's papers report: Lei et al. one decimal, SemEval two.
    decimals = 2 if dataset in ("semeval2016", "stackexchange") else 1
    columns = list(ev.FORUM_COLUMNS) if dataset == "stackexchange" else ["MAP", "MRR", "P@1", "P@5"]
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
            for column in e.per_query[0] if e.per_query else ():
                detail.add_column(column)
            for row in e.per_query:
                detail.add_row(
                    *(f"{v:.1f}" if isinstance(v, float) else str(v) for v in row.values())
                )
            stdout.print(detail)
