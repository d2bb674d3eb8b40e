"""Benchmark evaluation: re-rank each labelled query's candidates and score the rankings.

    benchmark = load_benchmark("semeval2016", "dev")
    evaluation = evaluate(benchmark, "bm25", backend=index)   # MAP, MRR, P@1, P@5, per query
    save_runs(Path("bm25.txt"), [evaluation])                  # a TREC run file
    compare(evaluation, other)                                 # paired significance of MAP

``qres evaluate`` is :func:`choose_rankers` and :func:`evaluate_rankers` (the evaluation
indexes, the model's encoder, fusion or BOW-CNN scorer) and a table.

Datasets:

* ``semeval2016`` — SemEval-2016 Task 3 subtask B; queries without a relevant candidate
  count with AP 0 (the official scorer);
* ``askubuntu`` — Lei et al. 2016's dev/test; queries without a similar question among their
  candidates are left out, as in the paper;
* ``android`` — the pairwise dev/test files of Shah et al. 2018's AskUbuntu → Android
  transfer: AUC(0.05) over every labelled pair, and MAP/MRR/P@k over each query's labelled
  candidates (queries without a positive left out, the AskUbuntu convention);
* ``stackexchange`` — full-forum duplicate search on a StackExchange dump
  (:mod:`qres.datasets.forum_duplicates`): each question closed as a duplicate searches the
  whole indexed forum with its title and body, its own id left out, through the production
  :class:`SearchPipeline`; Recall@1/10/100, MRR@10 and nDCG@10 with binary gains over its
  linked originals (the CQADupStack/BEIR convention, :mod:`qres.evaluation.ranking_metrics`);
  splits ``all``, ``train`` (oldest 80% by closing date), ``test`` (newest 20%).

Rankers (:mod:`qres.evaluation.rankers`): ``given-order``, ``bm25``, ``dense``, ``hybrid``,
``bow-cnn``.

Accuracy@k (dos Santos et al. 2015), asked for with ``accuracy_at``: each query with a relevant
question ranks the whole corpus except itself, and counts a hit at k when a relevant question
is among the first k. For AskUbuntu the whole corpus file goes into a second index,
``corpus_backend``, so the re-ranking figures keep their own index.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import replace
from functools import partial
from pathlib import Path

from qres.backends.base import Backend, BackendError
from qres.corpus.readers import CorpusError, Question, read_corpus
from qres.datasets.benchmarks import (
    LAYOUTS,
    RankingQuery,
    askubuntu_corpus,
    dataset_dir,
    load_android,
    load_askubuntu_eval,
    load_semeval,
    semeval_questions,
)
from qres.encoders.bowcnn_scorer import BowCnnScorer, is_bowcnn_model
from qres.evaluation import query_form, significance
from qres.evaluation import ranking_metrics as metrics
from qres.evaluation.benchmark import Benchmark, Evaluation, SetupError
from qres.evaluation.forum import FORUM_COLUMNS, FORUM_DEPTH, load_forum, score_forum  # noqa: F401
from qres.evaluation.rankers import make_ranker
from qres.evaluation.significance import Comparison
from qres.evaluation.trec import read_run, write_run
from qres.ranking.fusion import Fusion, shipped_fusion_for
from qres.ranking.search import DEFAULT_DENSE_CANDIDATES, MODES

DATASETS = ("askubuntu", "semeval2016", "android", "stackexchange")
AUC_MAX_FPR = 0.05
AUC_COLUMN = "AUC(0.05)"


def accuracy_column(k: int) -> str:
    return f"Acc@{k}"


# -- scoring --------------------------------------------------------------------------------


def given_order(query: RankingQuery) -> list[tuple[str, float]]:
    """The candidates in the order the dataset ships, with its scores (AskUbuntu's BM25) or,
    where it has none, n − rank."""
    if query.given_scores is None:
        n = len(query.candidates)
        return [(c, float(n - i)) for i, c in enumerate(query.candidates)]
    by_score = sorted(
        zip(query.given_scores, range(len(query.candidates)), strict=True), key=lambda t: -t[0]
    )
    return [(query.candidates[i], float(s)) for s, i in by_score]


def _query_question(query: RankingQuery, texts: Mapping[str, Question]) -> Question:
    question = query.question or texts.get(query.id)
    if question is None:
        raise BackendError(f"query {query.id} is not in the corpus given with --corpus")
    return question


def _lowest_below(scores: list[float]) -> list[float]:
    """-inf (a candidate the ranker did not return) → just below the lowest real score."""
    finite = [s for s in scores if s != float("-inf")]
    floor = min(finite) - 1.0 if finite else 0.0
    return [floor if s == float("-inf") else s for s in scores]


def _score(benchmark: Benchmark, ranker: str, rankings: list[list[bool]]) -> Evaluation:
    queries, skip = benchmark.queries, benchmark.skip_without_relevant
    counts = [len(q.relevant) for q in queries]
    summary = metrics.summarize(rankings, counts, skip)
    per_query = [
        {
            "query": q.id,
            "relevant": n,
            "AP": 100 * metrics.average_precision(r, n),
            "RR": 100 * metrics.reciprocal_rank(r),
            "P@1": 100 * metrics.precision_at(r, 1),
            "P@5": 100 * metrics.precision_at(r, 5),
        }
        for q, r, n in zip(queries, rankings, counts, strict=True)
        if not (skip and n == 0)
    ]
    return Evaluation(benchmark.dataset, benchmark.split, ranker, summary, per_query)


def evaluate(
    benchmark: Benchmark,
    ranker: str,
    backend: Backend | None = None,
    encoder=None,
    fusion=None,
    scorer=None,
    accuracy_at: Sequence[int] = (),
    corpus_backend: Backend | None = None,
    dense_candidates: int = DEFAULT_DENSE_CANDIDATES,
) -> Evaluation:
    """Rank each query's candidates with ``ranker`` (of ``qres.evaluation.rankers.RANKERS``), score
    them.

    ``backend`` is the evaluation index of the qres rankers (filled on first use), ``encoder``
    and ``fusion`` their model, ``scorer`` the BOW-CNN scorer of ``bow-cnn``. ``accuracy_at``
    adds Acc@k; when the benchmark's index holds only the candidates (AskUbuntu), the whole
    corpus goes into ``corpus_backend``.
    """
    if ranker == "given-order" and not benchmark.has_given_order:
        raise ValueError(
            f"{benchmark.dataset} pairs have no given order: rank with bm25, dense, hybrid, bow-cnn"
        )
    if benchmark.whole_forum and ranker in MODES:
        ranking = make_ranker(
            ranker,
            backend,
            encoder,
            fusion,
            scorer,
            benchmark.texts,
            benchmark.corpus,
            dense_candidates=dense_candidates,
            typing=benchmark.typing,
        )
        questions = [q.question for q in benchmark.queries]
        return score_forum(benchmark, ranker, ranking.top_scored(questions, FORUM_DEPTH))
    if ranker != "given-order" and benchmark.missing_texts:
        raise CorpusError(
            benchmark.folder,
            None,
            f"ranking with {ranker} needs the question texts: pass --corpus "
            "text_tokenized.txt.gz (from `qres download askubuntu`)",
        )
    if accuracy_at and ranker in MODES and benchmark.indexed and corpus_backend is None:
        raise ValueError(
            f"Accuracy@k on {benchmark.dataset} needs corpus_backend for the whole corpus"
        )
    ranking = make_ranker(
        ranker,
        backend,
        encoder,
        fusion,
        scorer,
        benchmark.texts,
        benchmark.corpus,
        indexed=benchmark.indexed,
        corpus_backend=corpus_backend if accuracy_at else None,
        dense_candidates=dense_candidates,
        typing=benchmark.typing,
    )
    rankings, pair_labels, pair_scores = [], [], []
    ranked: dict[str, list[tuple[str, float]]] = {}
    for q in benchmark.queries:
        if ranking is None:
            scored = given_order(q)
        else:
            scored = ranking.score(_query_question(q, benchmark.texts), q.candidates)
            pair_labels += [c in q.relevant for c, _ in scored]
            pair_scores += [s for _, s in scored]
        ranked[q.id] = scored
        rankings.append([c in q.relevant for c, _ in scored])
    evaluation = _score(benchmark, ranker, rankings)
    evaluation.ranked = ranked
    if benchmark.with_auc:
        evaluation.metrics[AUC_COLUMN] = metrics.auc_percent(
            pair_labels, _lowest_below(pair_scores), AUC_MAX_FPR
        )
    if accuracy_at:
        evaluation.metrics.update(
            accuracy(ranking, benchmark.queries, benchmark.texts, accuracy_at)
        )
    return evaluation


def accuracy(
    ranker, queries: Sequence[RankingQuery], texts: Mapping[str, Question], ks: Sequence[int]
) -> dict[str, float | None]:
    """Acc@k in percent over the queries with a relevant question, each ranking the whole
    corpus except itself; None for given-order, which ranks only the shipped candidates."""
    asked = [q for q in queries if q.relevant]
    if ranker is None:
        return {accuracy_column(k): None for k in ks} | {"accuracy_queries": len(asked)}
    tops = ranker.top([_query_question(q, texts) for q in asked], max(ks))
    result: dict[str, float | None] = {}
    for k in ks:
        hits = sum(
            any(c in q.relevant for c in top[:k]) for q, top in zip(asked, tops, strict=True)
        )
        result[accuracy_column(k)] = 100 * hits / len(asked) if asked else 0.0
    result["accuracy_queries"] = len(asked)
    return result


# -- evaluations ----------------------------------------------------------------------------


def load_benchmark(
    dataset: str,
    split: str | None,
    data_dir: Path | None = None,
    corpus: Path | None = None,
    links: bool = True,
    query: str = query_form.DEFAULT,
    typing: bool = False,
) -> Benchmark:
    """``split`` of ``dataset`` (one of ``DATASETS``) from ``data_dir`` (the layout's root;
    for android the folder of its files), each query searching in the form ``query``
    (:mod:`qres.evaluation.query_form`; ``typing``: a title form searched as it is typed,
    its last word completed, :mod:`qres.ranking.completion`).

    * semeval2016 — queries without a relevant candidate count with AP 0; Acc@k ranks every
      related question of the train and dev files;
    * askubuntu — the texts come from ``corpus`` (text_tokenized.txt.gz; without it only
      given-order can rank); the candidates' index holds the queries and candidates, Acc@k
      ranks the whole ``corpus`` file;
    * android — AUC(0.05) too; the whole corpus is indexed and is what Acc@k ranks;
    * stackexchange — the whole forum is indexed, with its duplicate links unless ``links``
      is False (:mod:`qres.evaluation.forum`).
    """
    try:
        query = query_form.check(query)
    except ValueError as err:
        raise SetupError("--query", str(err)) from None
    if typing and not query.startswith("title"):
        raise SetupError(
            "--typing", "--typing searches a title as it is typed: add --query title-chars:N"
        )
    benchmark = _load_benchmark(dataset, split, data_dir, corpus, links)
    if query == query_form.DEFAULT:
        return benchmark
    if benchmark.missing_texts:
        raise SetupError("--query", f"--query {query} needs the question texts: pass --corpus")
    queries = [
        replace(q, question=query_form.apply(_query_question(q, benchmark.texts), query))
        for q in benchmark.queries
    ]
    return replace(benchmark, queries=queries, query_form=query, typing=typing)


def _load_benchmark(dataset, split, data_dir, corpus, links) -> Benchmark:
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r} (one of {', '.join(DATASETS)})")
    split = default_split(dataset, split)
    if dataset == "stackexchange":
        return load_forum(split, data_dir, links)
    if split == "all":
        raise SetupError("--split", f"{dataset} has no split 'all': use dev or test")
    if dataset != "semeval2016" and split == "train":
        raise SetupError("--split", f"{dataset} has no labelled train split to evaluate on")
    if dataset == "android":
        data_dir = data_dir if data_dir is not None else dataset_dir("android")
        labelled = load_android(data_dir, split)
        questions = labelled.questions
        return Benchmark(
            dataset,
            split,
            labelled.queries,
            questions,
            questions.values,
            True,
            with_auc=True,
            has_given_order=False,
            source=data_dir,
            folder=data_dir,
        )
    folder = dataset_dir(dataset, data_dir)
    if dataset == "semeval2016":
        labelled = load_semeval(folder, split)
        corpus_questions = partial(semeval_questions, folder)
        return Benchmark(
            dataset,
            split,
            labelled.queries,
            labelled.questions,
            corpus_questions,
            False,
            folder=folder,
        )
    (split_file,) = LAYOUTS["askubuntu"].files(folder, split)
    queries = load_askubuntu_eval(split_file)
    corpus = corpus or askubuntu_corpus(folder)  # beside the files, or downloaded
    texts: dict[str, Question] = {}
    if corpus is not None:
        needed = {q.id for q in queries} | {c for q in queries for c in q.candidates}
        texts = {q.id: q for q in read_corpus(corpus, "askubuntu") if q.id in needed}
    return Benchmark(
        dataset,
        split,
        queries,
        texts,
        partial(read_corpus, corpus, "askubuntu"),
        True,
        indexed=texts.values,
        source=corpus,
        folder=folder,
        missing_texts=corpus is None,
    )


def default_split(dataset: str, split: str | None) -> str:
    """``split``, else the dataset's usual one: ``all`` of a forum, else ``dev``."""
    return split or ("all" if dataset == "stackexchange" else "dev")


def setup_notes(benchmark: Benchmark, typing: bool, rankers_given: bool) -> list[str]:
    """What the figures assume that the command line may not have said, a line each."""
    notes = []
    if not rankers_given and benchmark.missing_texts:
        notes.append(
            "given order alone: ranking with bm25 (and models) needs the question texts, "
            "AskUbuntu's text_tokenized.txt.gz (--corpus FILE)"
        )
    if benchmark.with_links:
        notes.append(
            "duplicate links followed: a question closed as a duplicate before the query was "
            "gives way to its original (--no-links: the text alone)"
        )
    if benchmark.query_form != "question":
        typed = ", searched as typed: the last word completed (--typing)" if typing else ""
        notes.append(f"queries: {benchmark.query_form} (--query){typed}")
    return notes


def choose_rankers(
    dataset: str, rankers: Sequence[str], model: Path | None, texts: bool = True
) -> tuple[str, ...]:
    """``rankers`` checked against the dataset, split and model; by default given-order and
    bm25, plus dense and hybrid with an encoder model or bow-cnn with a BOW-CNN one
    (without the questions' ``texts``, AskUbuntu's without --corpus: given-order alone)."""
    bowcnn = model is not None and is_bowcnn_model(model)
    if not rankers and not texts:
        return ("given-order",)
    if not rankers:
        rankers = ("given-order", "bm25")
        if model:  # a BOW-CNN's dense vectors would be its CNN half alone
            rankers += ("bow-cnn",) if bowcnn else ("dense", "hybrid")
        if dataset in ("android", "stackexchange"):
            rankers = tuple(r for r in rankers if r != "given-order")
    if dataset == "android" and "given-order" in rankers:
        raise SetupError("--ranker", "Android pairs have no given order")
    if dataset == "stackexchange" and not set(rankers) <= set(MODES):
        raise SetupError("--ranker", "a forum is searched with bm25, dense or hybrid")
    if "bow-cnn" in rankers and not bowcnn:
        raise SetupError("--ranker", "bow-cnn needs --model DIR of a BOW-CNN export")
    return tuple(rankers)


def check_options(
    dataset: str, rankers: Sequence[str], accuracy_at: Sequence[int], fusion_file: Path | None
) -> None:
    """Options that would do nothing with these rankers, or fail once every query was run:
    refused before any data is read."""
    if accuracy_at and dataset == "stackexchange":
        why = "a forum's queries already rank the whole forum: read R@1, R@10, R@100"
        raise SetupError("--accuracy-at", why)
    if fusion_file is not None and "hybrid" not in rankers:
        raise SetupError("--fusion", "fuses the hybrid ranker's scores: add --ranker hybrid")


def evaluate_rankers(
    benchmark: Benchmark,
    rankers: Sequence[str],
    model: Path | None,
    open_index: Callable[[str], AbstractContextManager[Backend]],
    load_encoder: Callable[[Path], object],
    accuracy_at: Sequence[int] = (),
    note: Callable[[str], None] = lambda _message: None,
    fusion_file: Path | None = None,
    dense_candidates: int = DEFAULT_DENSE_CANDIDATES,
) -> list[Evaluation]:
    """What ``qres evaluate`` does: each ranker of :func:`choose_rankers` on ``benchmark``
    with ``model`` (an encoder or a BOW-CNN export, or a list of several encoders, whose
    vectors then share one evaluation index and are fused by ``fusion_file``, equal
    weights without one; ``fusion_file`` replaces a single model's own fusion too).

    The qres rankers use evaluation indexes opened with ``open_index(name)``; the name holds
    the model's fingerprint and the texts' source, so an index is re-used only for the same
    model and corpus. ``note`` is told what the figures should be read with (a fusion
    tuned on the split scored, or cross-validated on it).
    """
    if isinstance(model, list | tuple):
        if len(model) > 1:
            return _evaluate_models(
                benchmark,
                rankers,
                model,
                open_index,
                load_encoder,
                accuracy_at,
                note,
                fusion_file,
                dense_candidates,
            )
        model = model[0] if model else None
    bowcnn = model is not None and is_bowcnn_model(model)
    wants_vectors = any(r in ("dense", "hybrid") for r in rankers)
    encoder = load_encoder(model) if model and (wants_vectors or not bowcnn) else None
    if wants_vectors and encoder is None:
        raise BackendError("the dense and hybrid rankers need --model MODEL_DIR")
    scorer = BowCnnScorer.load(model) if "bow-cnn" in rankers else None
    fusion = None
    if encoder is not None:
        fusion = Fusion.load(model) if fusion_file is None else _read_fusion(fusion_file, [encoder])
    key = "bm25" if encoder is None else encoder.fingerprint[:16]
    return _evaluate_with(
        benchmark,
        rankers,
        encoder,
        fusion,
        scorer,
        key,
        open_index,
        accuracy_at,
        note,
        dense_candidates,
    )


def _read_fusion(path: Path, encoders) -> Fusion:
    """The fusion file ``path``, checked to fuse exactly the given encoders' models."""
    fusion = Fusion.read(path)
    given = [e.fingerprint for e in encoders]
    named = fusion.models or given[:1]  # a file without models: one model's fusion
    for fp in named:
        if fp not in given:
            raise BackendError(
                f"{path} fuses model {fp[:12]}, which is not given: pass --model DIR of every "
                "model it fuses"
            )
    for fp in given:
        if fp not in named:
            raise BackendError(f"{path} does not fuse model {fp[:12]} given with --model")
    return fusion


def _evaluate_models(
    benchmark, rankers, models, open_index, load_encoder, accuracy_at, note, fusion_file, dense
):
    """Several encoders: one evaluation index holds every model's vectors, searched by the
    production pipeline with the cosines in the fusion's order."""
    if "bow-cnn" in rankers:
        raise BackendError("the bow-cnn ranker takes one --model")
    encoders = [load_encoder(m) for m in models]
    by_fingerprint = {e.fingerprint: e for e in encoders}
    if len(by_fingerprint) < len(encoders):
        raise BackendError("a model is given twice with --model")
    shipped = shipped_fusion_for(list(by_fingerprint)) if fusion_file is None else None
    if shipped is not None:
        fusion = shipped
        if "hybrid" in rankers:
            note("hybrid: the fusion shipped for this model set (qres/models/*-set/fusion.json)")
    elif fusion_file is None:
        fusion = Fusion.equal(sorted(by_fingerprint))
        if "hybrid" in rankers:
            note(f"hybrid: {fusion.source} (pass --fusion FILE from `qres tune-fusion --cv`)")
    else:
        fusion = _read_fusion(fusion_file, encoders)
    ordered = [by_fingerprint[fp] for fp in fusion.models]
    key = "+".join(fp[:12] for fp in sorted(by_fingerprint))
    return _evaluate_with(
        benchmark, rankers, ordered, fusion, None, key, open_index, accuracy_at, note, dense
    )


def _evaluate_with(
    benchmark, rankers, encoder, fusion, scorer, key, open_index, accuracy_at, note, dense
):
    dataset, split = benchmark.dataset, benchmark.split
    in_sample = fusion is not None and not fusion.cv and fusion.tuned_on == f"{dataset}/{split}"
    fusion = _folds_for(fusion, benchmark)
    evaluations = []
    for ranker in rankers:
        if ranker == "hybrid" and in_sample:
            note(
                f"warning: the fusion weights were tuned on {dataset} {split}: "
                "the hybrid figures on it are optimistic"
            )
        if ranker == "hybrid" and fusion and fusion.cv:  # folds of this benchmark's queries
            note(
                f"hybrid: {fusion.method} fusion cross-validated in {fusion.cv['folds']} folds "
                f"over {fusion.tuned_on}: each of those queries is scored with the fusion "
                "fitted without it"
            )
        with ExitStack() as indexes:
            backend = corpus_backend = None
            if ranker in MODES:
                backend = indexes.enter_context(open_index(eval_index_name(benchmark, key)))
                if benchmark.indexed is not None and accuracy_at and benchmark.source:
                    # Acc@k ranks the whole corpus file, kept apart from the candidates' index.
                    name = eval_index_name(benchmark, key, "all-")
                    corpus_backend = indexes.enter_context(open_index(name))
            evaluations.append(
                evaluate(
                    benchmark,
                    ranker,
                    backend,
                    encoder,
                    fusion,
                    scorer,
                    accuracy_at,
                    corpus_backend,
                    dense,
                )
            )
    return evaluations


def _folds_for(fusion: Fusion | None, benchmark: Benchmark) -> Fusion | None:
    """``fusion`` with only the cross-validation folds of ``benchmark``'s own queries, so
    that a query is scored with the fit that did not see it, and a query of another dataset
    or forum whose id happens to match one fitted on is not. A forum query counts as the
    one fitted on only with the same originals (``cv["originals"]``): ids repeat across
    forums."""
    if fusion is None or not fusion.cv:
        return fusion
    if not _tuned_on_split(fusion, benchmark.dataset, benchmark.split):
        return replace(fusion, cv=None)
    fold_of, originals = fusion.cv.get("fold_of", {}), fusion.cv.get("originals")
    if benchmark.whole_forum and originals is not None:
        same = {q.id for q in benchmark.queries if originals.get(q.id) == sorted(q.relevant)}
        fold_of = {q: fold for q, fold in fold_of.items() if q in same}
    elif originals is not None:  # a fit that also saw a forum: only its SemEval ids apply
        fold_of = {q: fold for q, fold in fold_of.items() if q not in originals}
    if not fold_of:
        return replace(fusion, cv=None)
    return replace(fusion, cv={**fusion.cv, "fold_of": fold_of})


def _tuned_on_split(fusion, dataset: str, split: str) -> bool:
    """Whether ``split`` of ``dataset`` holds queries ``fusion`` was (cross-)fitted on.
    ``tuned_on`` reads "semeval2016/train+dev", or "semeval2016/dev+stackexchange/train"
    for a fit over two sources."""
    tuned, current = set(), ""
    for part in (fusion.tuned_on or "").split("+"):
        current, _, name = part.rpartition("/") if "/" in part else (current, "", part)
        tuned.add((current, name))
    return any(d == dataset and split in ("all", s) for d, s in tuned)


def eval_index_name(benchmark: Benchmark, key: str, part: str = "") -> str:
    """The evaluation index of ``benchmark``'s texts for models ``key`` (their fingerprints'
    heads, or ``bm25``): re-used only for the same models and the same source file."""
    if benchmark.source is not None:
        where = str(benchmark.source.resolve())
        if benchmark.with_links:  # that index holds the forum's duplicate links as well
            where += "|links"
        if benchmark.searched is not None:  # that index holds a part of the forum
            where += f"|searched={benchmark.searched}"
        key += "-" + hashlib.sha1(where.encode()).hexdigest()[:8]
    return f"{benchmark.dataset}-{part}{key}"


def evaluate_run(
    benchmark: Benchmark, path: Path, note: Callable[[str], None] = lambda _message: None
) -> Evaluation:
    """A TREC run file's rankings scored on ``benchmark``, named after the file; a query the
    run leaves out ranks nothing (AP 0; ``note`` is told how many), a query the benchmark
    does not hold is refused, and so is a run with no rankings."""
    run = read_run(path)
    if not run:
        raise CorpusError(path, None, "no rankings in it: an empty run")
    known = {q.id for q in benchmark.queries}
    unknown = sorted(set(run) - known)
    if unknown:
        raise CorpusError(
            path, None, f"query {unknown[0]} is not in {benchmark.dataset} {benchmark.split}"
        )
    if len(run) < len(known):
        note(
            f"{path}: ranks {len(run)} of the {len(known)} queries of {benchmark.dataset} "
            f"{benchmark.split}; the other {len(known) - len(run)} count as ranking nothing "
            "(a run of another --split?)"
        )
    if benchmark.whole_forum:
        tops = [[(d, 0.0) for d in run.get(q.id, []) if d != q.id] for q in benchmark.queries]
        return score_forum(benchmark, Path(path).name, tops)
    rankings = [[d in q.relevant for d in run.get(q.id, [])] for q in benchmark.queries]
    return _score(benchmark, Path(path).name, rankings)


def save_runs(path: Path, evaluations: Sequence[Evaluation]) -> list[tuple]:
    """Each evaluation's rankings as a TREC run file tagged with its ranker: ``path`` for
    one, ``<stem>.<ranker>.txt`` beside it for several; (file, evaluation, lines) of each."""
    written = []
    for e in evaluations:
        out = path if len(evaluations) == 1 else path.with_name(f"{path.stem}.{e.ranker}.txt")
        written.append((out, e, write_run(out, e.ranked, e.ranker)))
    return written


def compare(first: Evaluation, second: Evaluation, measure: str | None = None) -> Comparison:
    """Paired significance of ``second``'s mean ``measure`` (default: AP, nDCG@10 on a forum)
    against ``first``'s (:mod:`qres.evaluation.significance`) over their per-query values."""
    measure = measure or compared_measure(first.dataset)

    def aps(e: Evaluation) -> dict[str, float]:
        return {row["query"]: row[measure] for row in e.per_query}

    return significance.compare(first.ranker, aps(first), second.ranker, aps(second))


def compared_measure(dataset: str) -> str:
    """The per-query measure ``--compare`` tests: nDCG@10 on a forum, else AP (MAP)."""
    return "nDCG@10" if dataset == "stackexchange" else "AP"
