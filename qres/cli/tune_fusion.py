"""``qres tune-fusion``: learning the BM25/cosine fusion on SemEval labels, or by
cross-validation on a StackExchange forum's train split."""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

import click
from rich.table import Table

from qres.cli.given_options import given, refuse_given
from qres.cli.group import (
    Context,
    console,
    dense_candidates_option,
    json_option,
    model_set_option,
    stdout,
)
from qres.encoders.model_set import with_model_set


@click.command("tune-fusion")
@json_option
@click.option(
    "--dataset",
    type=click.Choice(["semeval2016", "stackexchange"]),
    default="semeval2016",
    show_default=True,
    help="stackexchange: cross-validate (--cv, default 5) over the forum's train split (not "
    "--split) of duplicate links, each query searching the whole forum; test split never read.",
)
@dense_candidates_option
@click.option(
    "--held-out",
    is_flag=True,
    help="stackexchange: only the newest tenth of the train split, the queries an encoder "
    "fine-tuned with `qres train --hold-out` never saw.",
)
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
    help="Write the fusion here (for `qres search --fusion`, `qres evaluate --fusion`) "
    "instead of into the model directory; needed with --cv and several --model.",
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
@click.option(
    "--forum",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="With --cv on semeval2016: also cross-validate over this StackExchange dump's train "
    "split of duplicate links (each query searching the whole forum), so the fusion suits "
    "full-forum search too. Each dataset weighs half in the fit; the fusion is chosen by the "
    "mean of SemEval's MAP and the forum's nDCG@10. The forum's test split is never read.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The dataset's folder [default: qres download's; stackexchange: the dump's folder].",
)
@click.pass_obj
def tune_fusion_command(
    obj: Context,
    dataset,
    dense_candidates,
    held_out,
    models,
    model_set,
    out,
    split,
    folds,
    cv_splits,
    method,
    report,
    data_dir,
    forum,
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
      qres tune-fusion --model-set minilm --cv 5
      qres tune-fusion --model-set minilm --model qres/models/default --cv 5 \\
          --cv-splits dev --report fusion-cv.json --out fusion-both.json
      qres tune-fusion --model-set fast --cv 5 --cv-splits dev --method pairwise-linear \\
          --forum ../shared/data/stackexchange-travel --out fusion-both.json
      qres tune-fusion --dataset stackexchange --data-dir ../shared/data/stackexchange-travel \\
          --model models/minilm-travel
    """
    from qres.datasets.benchmarks import default_data_dir
    from qres.evaluation import forum_fusion
    from qres.evaluation.fusion_fit import candidate_scores, tune_fusion
    from qres.evaluation.rankers import open_eval_index

    models = with_model_set(model_set, models)
    if not models:
        raise click.BadParameter("give --model DIR or --model-set", param_hint="--model")
    if forum is not None and (dataset != "semeval2016" or folds is None):
        alone = "for a forum alone: --dataset stackexchange --data-dir DIR"
        message = f"--forum adds a forum's queries to a SemEval --cv fit: give --cv K ({alone})"
        raise click.BadParameter(message, param_hint="--forum")
    if dataset == "stackexchange":
        if given("split") and split != forum_fusion.SPLIT:
            raise click.BadParameter(forum_fusion.SPLIT_FIXED, param_hint="--split")
        refuse_given("cv_splits", why="picks SemEval splits: not with --dataset stackexchange")
        forum = (folds or 5, method, report, data_dir, dense_candidates, held_out)
        _tune_forum(obj, models, out, *forum)
        return
    refuse_given("held_out", why="only with --dataset stackexchange (a forum's held-out tenth)")
    if folds is None:
        refuse_given("method", "report", "cv_splits", why="only with --cv K")
        if len(models) > 1:
            raise click.BadParameter("several models need --cv", param_hint="--model")
    data_dir = data_dir or default_data_dir()
    encoders = [obj.load_encoder(m) for m in models]
    with ExitStack() as stack:
        names = [f"semeval2016-{e.fingerprint[:16]}" for e in encoders]
        backends = [stack.enter_context(open_eval_index(obj.backend_name, n)) for n in names]
        if folds is not None:
            semeval = (backends, folds, cv_splits, method, data_dir)
            _tune_fusion_cv(obj, models, encoders, *semeval, forum, dense_candidates, out, report)
            return
        lists = candidate_scores(data_dir, split, backends[0], encoders[0])
    fusion = tune_fusion(
        lists, source=f"semeval2016 {split}, MAP grid search", tuned_on=f"semeval2016/{split}"
    )
    saved = fusion.save_file(out) if out is not None else fusion.save(models[0])
    if obj.as_json:
        obj.emit(asdict(fusion))
    else:
        console.print(
            f"fusion = {fusion.bm25:.3f} * bm25/top + {fusion.cosine:.3f} * cosine "
            f"+ {fusion.bias:.3f}  (saved to {saved})"
        )


def _tune_fusion_cv(
    obj, models, encoders, backends, folds, cv_splits, method, data_dir, forum, dense, out, report
):
    from qres.evaluation import forum_fusion
    from qres.evaluation import fusion_fit as fcv
    from qres.evaluation.rankers import open_eval_index

    splits = [s.strip() for s in cv_splits.split(",") if s.strip()]
    benchmark = forum_fusion.train_split(forum) if forum is not None else None  # fail early
    lists = fcv.semeval_candidate_lists(
        data_dir, splits, list(zip(backends, encoders, strict=True))
    )
    what = f"{len(lists)} SemEval queries ({'+'.join(splits)})"
    if benchmark is not None:
        open_index = lambda name: open_eval_index(obj.backend_name, name)  # noqa: E731
        more = forum_fusion.indexed_lists(benchmark, encoders, open_index, dense)
        what += f" and {len(more)} of the forum's train split, each half the weight"
        lists += more
    result = fcv.compare_fusions(lists, ["bm25", *map(str, models)], folds, method)
    if benchmark is not None:
        result["record"]["originals"] = forum_fusion.originals(benchmark)
    fusion = fcv.fusion_from(result, [e.fingerprint for e in encoders])
    _report(obj, result, fusion, models, out, report, f"{folds}-fold CV over {what}")


def _tune_forum(obj, models, out, folds, method, report, data_dir, dense_candidates, held_out):
    from qres.evaluation import forum_fusion
    from qres.evaluation.rankers import open_eval_index

    encoders = [obj.load_encoder(m) for m in models]
    open_index = lambda name: open_eval_index(obj.backend_name, name)  # noqa: E731
    forum = (folds, method, dense_candidates, [Path(m).name for m in models], held_out)
    result, fusion = forum_fusion.tune(data_dir, encoders, open_index, *forum)
    record = result["record"]
    title = (
        f"{folds}-fold CV over {record['queries']} of the forum's train-split queries "
        f"({record['candidates_per_query']:.0f} candidates on average, "
        f"{record['originals_in_candidates']:.2f}% of originals among them)"
    )
    _report(obj, result, fusion, models, out, report, title, "; the test split was not read")


def _report(obj, result, fusion, models, out, report, title, after=""):
    """Save the fusion (into --out, else the one model's directory) and report the comparison:
    JSON (every query's figures into ``report``), or a table of each ranker's figures."""
    from qres.evaluation.fusion_fit import comparison_table

    saved = fusion.save_file(out) if out else fusion.save(models[0]) if len(models) == 1 else None
    record = {**result["record"], "fingerprints": fusion.cv["fingerprints"]}
    summary = {"chosen": result["chosen"], "params": result["params"], "methods": result["rows"]}
    summary |= {"saved": str(saved) if saved else None, "record": record}
    if report:
        report.write_text(json.dumps({**summary, **record, "per_query": result["per_query"]}))
    if obj.as_json:
        obj.emit(summary)
        return
    headers, rows = comparison_table(result)
    table = Table(title=title)
    for header in headers:
        table.add_column(header, justify="left" if header == "ranker" else "right")
    for row in rows:
        table.add_row(*row)
    stdout.print(table)
    where = f"saved to {saved}" if saved else "not saved: pass --out FILE"
    console.print(f"kept {result['chosen']} ({where}){after}")
