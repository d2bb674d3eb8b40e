"""``qres adapt``: fine-tune MiniLM on a forum's own duplicate links, fit its fusion, write a
model set for that forum and say what it changed (:mod:`qres.training.forum_adapt`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from qres.training.commands import fail, require_torch

POSTS = ("Posts.xml", "Posts.xml.gz")


@click.command(
    "adapt",
    epilog="""\b
Example:
  qres adapt ../shared/data/stackexchange-travel --name travel
  qres index ../shared/data/stackexchange-travel/Posts.xml \\
      --model-set travel --index-dir travel-index

\b
FORUM is a StackExchange dump's folder, with Posts.xml and PostLinks.xml (.gz
or plain). Its duplicate links are split by time: the oldest 80% train (their
newest tenth held out to fit the fusion), the newest 20% measure before and
after, each searching the whole forum (a forum of more than 20,000 questions:
those its links join and a fixed sample of the rest, 20,000 in all).
Each step is kept as it finishes, and fine-tuning saves a checkpoint every 20
steps: run the same command again to resume after a crash or Ctrl-C. Needs
the models extra (torch); a GPU is used when torch sees one. On a CPU, texts
are cut to 128 tokens while training, and only the newest 1,000 training
links are read (--max-links). The travel forum (4,919 questions, 1,080
duplicates, 824 training links) took 11-18 minutes and 2.2-2.8 GB on 2 CPU
cores (39 minutes on a day the machine ran 2.3x slower), under 2 minutes on
one H100 GPU and 16 cores (whole texts).""",
)
@click.argument("forum", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--name",
    default=None,
    help="The model set's name, for --model-set NAME [default: the folder's name].",
)
@click.option(
    "--epochs",
    type=click.IntRange(1, 20),
    default=2,
    show_default=True,
    help="Passes over the training links (the last one asks with titles alone).",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="Where to fine-tune.",
)
@click.option(
    "--max-links",
    type=click.IntRange(min=0),
    default=None,
    help="Fine-tune on the newest N training links at most (0: all) [default: 1,000 "
    "on a CPU, which keeps a large forum near half an hour on 2 cores; all on a GPU].",
)
@click.option("--again", is_flag=True, help="Start over: forget the work of an earlier run.")
@click.option("--verbose", is_flag=True, help="Also print the training loss as it goes.")
def adapt(
    forum: Path,
    name: str | None,
    epochs: int,
    device: str,
    max_links: int | None,
    again: bool,
    verbose: bool,
):
    """Learn a forum's own model set from its duplicate links, in one command."""
    require_torch()
    import shutil

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from qres.corpus.readers import CorpusError
    from qres.encoders.runtime import EncoderError
    from qres.training import forum_adapt

    try:
        if name is None and not forum_adapt.is_set_name(forum.resolve().name):
            fail(f"{forum}: its folder's name is no model set name: give one with --name NAME")
        chosen = forum.resolve().name if name is None else name
        plan = forum_adapt.Adaptation(forum, forum_adapt.check_name(chosen))
    except forum_adapt.AdaptError as err:
        fail(str(err))
    if again:  # the set made before is replaced only once the new one is whole
        shutil.rmtree(plan.work, ignore_errors=True)
    console = Console(stderr=True)
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        disable=not console.is_terminal,
    )
    task = {"id": None}

    def step(what: str, total: int | None) -> None:
        if task["id"] is not None:
            bar.update(task["id"], visible=False)
        task["id"] = bar.add_task(what, total=total)
        if not console.is_terminal:
            console.print(what, highlight=False, markup=False)

    def advance(n: int) -> None:
        bar.advance(task["id"], n)

    def log(message: str) -> None:
        if verbose:
            bar.console.print(message, highlight=False, markup=False)

    links = "auto" if max_links is None else (max_links or None)  # 0: every link
    try:
        with bar:
            report = forum_adapt.adapt(
                plan, step, advance, log, epochs, device, again=again, max_links=links
            )
    except (forum_adapt.AdaptError, CorpusError, EncoderError, ValueError) as err:
        fail(str(err))
    except OSError as err:  # a full disk, say: what was done is kept
        where = f"{err.filename}: " if err.filename else ""
        fail(f"{where}{err.strerror or err} (fix that, then run the same command to resume)")
    except KeyboardInterrupt:  # as every command says it: no "error:", exit status 130
        click.echo("interrupted: run the same command again to resume where it stopped", err=True)
        sys.exit(130)
    _print_report(report, plan)


def _print_report(report: dict, plan) -> None:
    from qres.encoders import model_set

    searched = report.get("searched")  # None: each searched the whole forum
    part = (
        f", each searching {searched:,} of its questions (those its links join and a fixed "
        "sample of the rest: figures run higher than over the whole forum)"
        if searched
        else ""
    )
    click.echo(
        f"before (the minilm set) and after, on the forum's newest {report['queries']} "
        f"duplicates, their text alone (links not followed){part}:"
    )
    made = plan.target / model_set.SET_FILE
    trained = json.loads(made.read_text()).get("fine_tuning", {}) if made.is_file() else {}
    if trained.get("pairs", 0) < trained.get("pairs_available", 0):
        click.echo(
            f"fine-tuned on the newest {trained['pairs']:,} of the forum's "
            f"{trained['pairs_available']:,} training links (--max-links 0 reads them all)"
        )
    for form in ("question", "title"):
        ndcg, recall = report["nDCG@10"][form], report["R@100"][form]
        click.echo(
            f"  {form + ' queries:':17} nDCG@10 {ndcg['before']:.2f} -> {ndcg['after']:.2f}, "
            f"R@100 {recall['before']:.2f} -> {recall['after']:.2f}"
        )
    click.echo(f"wrote model set {plan.name} in {plan.target}")
    posts = next((plan.forum / n for n in POSTS if (plan.forum / n).is_file()), None)
    click.echo(f"next: qres index {posts or plan.forum / POSTS[0]} --model-set {plan.name}")
