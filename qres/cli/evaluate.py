"""``qres evaluate``: scoring rankers on a labelled benchmark."""

from __future__ import annotations

from pathlib import Path

import click

from qres.cli.given_options import refuse_given
from qres.cli.group import (
    Context,
    console,
    dense_candidates_option,
    json_option,
    model_set_option,
)
from qres.cli.scores import dataset_options, print_comparison, print_evaluations, with_comparison
from qres.encoders.model_set import with_model_set


def _accuracy_cutoffs(_ctx, _param, values) -> tuple[int, ...]:
    """``--accuracy-at 1,5 --accuracy-at 10`` → (1, 5, 10)."""
    cutoffs = set()
    for value in values:
        for part in value.split(","):
            if not part.strip().isdigit() or int(part) < 1:
                raise click.BadParameter(f"{part.strip()!r} is not a whole number k >= 1")
            cutoffs.add(int(part))
    return tuple(sorted(cutoffs))


@click.command()
@json_option
@dataset_options
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
@dense_candidates_option
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
    "and the pair files [default: android/ in that dir]; for stackexchange, the dump's "
    "folder with Posts.xml and PostLinks.xml [default: stackexchange-travel/ in that dir].",
)
@click.option(
    "--corpus",
    type=click.Path(dir_okay=False, path_type=Path),
    help="AskUbuntu text_tokenized.txt(.gz), needed to rank AskUbuntu with qres itself "
    "[default: beside its files, or where `qres download askubuntu` put it].",
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
@click.option(
    "--links/--no-links",
    default=True,
    help="stackexchange: index the forum with its duplicate links, so that a question found "
    "that was closed as a duplicate before the query was gives way to its original, as "
    "`qres search` does; --no-links ranks on the text alone.  [default: --links]",
)
@click.option(
    "--query",
    "query",
    default="question",
    show_default=True,
    metavar="FORM",
    help="What each query searches with: question (its title and body), title (its title "
    "alone), title-words:N (the title's first N words: what a widget has while a title "
    "is being typed) or title-chars:N (its first N characters, the last word often cut).",
)
@click.option(
    "--typing",
    is_flag=True,
    help="Search a title query as the widget sends a title being typed: its last word, "
    "maybe unfinished, completed from the titles of its best BM25 matches (as `qres search "
    "--typing`).",
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
    dense_candidates,
    fusion,
    data_dir,
    corpus,
    accuracy_at,
    links,
    query,
    typing,
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
    stackexchange  DIR/Posts.xml, PostLinks.xml: each duplicate searches the
                 forum; R@1/10/100, MRR@10, nDCG@10; --split all, train (oldest
                 80%), test (newest 20%).
                 A question found that the forum closed as a duplicate before the
                 query was gives way to its original (--no-links: text alone).
    --query title (or title-words:N, title-chars:N) searches with each query's
    title (or its first N words, characters) instead of the whole question: what a
    widget sends; --typing completes a cut last word first, as the widget does.
    The qres rankers run the production search path (each query's candidates only,
    or the whole forum), over an evaluation index kept under $QRES_HOME/eval.
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
      qres evaluate --dataset semeval2016 --model-set minilm --model qres/models/default \\
          --fusion fusion-both.json
      qres evaluate --dataset semeval2016 --model-set default --ranker bm25 --ranker hybrid \\
          --compare
      qres evaluate --dataset stackexchange --split test --ranker bm25 --ranker hybrid \\
          --model-set default --compare
      qres evaluate --dataset stackexchange --split test --model-set fast --no-links
      qres evaluate --dataset stackexchange --split test --model-set fast --query title
      qres evaluate --dataset stackexchange --split test --ranker bm25 --query title-words:4
      qres evaluate --dataset stackexchange --split train --model-set minilm --no-links \\
          --query title-chars:20 --typing
    """
    from qres.evaluation import runner as ev
    from qres.evaluation.rankers import open_eval_index

    models = with_model_set(model_set, models)
    if dataset != "stackexchange":
        refuse_given("links", why="only a forum (--dataset stackexchange) has duplicate links")
    if save_run is not None and not save_run.parent.is_dir():
        raise click.BadParameter(f"{save_run.parent}: no such folder", param_hint="--save-run")
    model = models[0] if models else None
    given_rankers = bool(rankers)
    try:
        ev.check_options(dataset, ev.choose_rankers(dataset, rankers, model), accuracy_at, fusion)
        benchmark = ev.load_benchmark(dataset, split, data_dir, corpus, links, query, typing)
        rankers = ev.choose_rankers(dataset, rankers, model, not benchmark.missing_texts)
        if typing and not set(rankers) <= set(ev.MODES):
            raise ev.SetupError("--typing", "--typing needs rankers that search (bm25, hybrid)")
    except ev.SetupError as err:
        raise click.BadParameter(str(err), param_hint=err.option) from None
    for note in ev.setup_notes(benchmark, typing, given_rankers):
        console.print(note, highlight=False)
    if compare and len(rankers) != 2:
        raise click.BadParameter("--compare needs exactly two --ranker", param_hint="--compare")
    evaluations = ev.evaluate_rankers(
        benchmark,
        rankers,
        list(models),
        lambda name: open_eval_index(obj.backend_name, name),
        obj.load_encoder,
        accuracy_at,
        note=lambda message: console.print(message, highlight=False),
        fusion_file=fusion,
        dense_candidates=dense_candidates,
    )
    if save_run is not None:
        _save_runs(save_run, evaluations)
    comparison = ev.compare(*evaluations) if compare else None
    if obj.as_json:
        summaries = [e.summary(per_query) for e in evaluations]
        obj.emit(summaries if comparison is None else with_comparison(summaries, comparison))
        return
    print_evaluations(dataset, benchmark.split, evaluations, accuracy_at, per_query)
    if comparison is not None:
        print_comparison(comparison, dataset)


def _save_runs(path: Path, evaluations) -> None:
    from qres.evaluation.runner import save_runs

    for out, e, lines in save_runs(path, evaluations):
        console.print(f"wrote {out}: {lines} lines ({e.ranker}, TREC run format)", highlight=False)
