"""``qres compare-runs``: two saved TREC runs scored on a benchmark, and whether their MAPs
differ."""

from __future__ import annotations

from pathlib import Path

import click

from qres.cli.group import Context, json_option
from qres.cli.scores import dataset_options, print_comparison, print_evaluations, with_comparison


@click.command("compare-runs")
@json_option
@click.argument("run_a", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@dataset_options
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
    warn = lambda message: click.echo(f"warning: {message}", err=True)  # noqa: E731
    evaluations = [ev.evaluate_run(benchmark, path, warn) for path in (run_a, run_b)]
    comparison = ev.compare(*evaluations)
    if obj.as_json:
        obj.emit(with_comparison([e.summary() for e in evaluations], comparison))
        return
    print_evaluations(dataset, benchmark.split, evaluations, (), False)
    print_comparison(comparison, dataset)
