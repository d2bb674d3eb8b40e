"""Benchmark evaluation: re-rank each labelled query's candidates and score the rankings.

Datasets:

* ``semeval2016`` — SemEval-2016 Task 3 subtask B; queries without a relevant candidate
  count with AP 0 (the official scorer);
* ``askubuntu`` — Lei et al. 2016's dev/test; queries without a similar question among their
  candidates are left out, as in the paper;
* ``android`` — the pairwise dev/test files of Shah et al. 2018's AskUbuntu → Android
  transfer: AUC(0.05) over every labelled pair, and MAP/MRR/P@k over each query's labelled
  candidates (queries without a positive left out, the AskUbuntu convention).

Rankers:

* ``given-order`` — the order the dataset ships: AskUbuntu's Lucene BM25 scores, SemEval's
  search-engine order (RELQ_RANKING_ORDER); Android pairs have none;
* ``bm25``, ``dense``, ``hybrid`` — qres's own :class:`qres.search.SearchPipeline`, the
  production query path, restricted to the query's candidates. The texts are indexed into an
  evaluation index (SemEval: every related question of the train and dev files; AskUbuntu:
  the queries and candidates of the corpus file given with ``corpus``; Android: its corpus);
* ``bow-cnn`` — a BOW-CNN model's similarity (:mod:`qres.bowcnn`), no index needed.

Accuracy@k (dos Santos et al. 2015), asked for with ``accuracy_at``: each query with a relevant
question ranks the whole corpus except itself, and counts a hit at k when a relevant question
is among the first k. For AskUbuntu the whole corpus file goes into a second index,
``corpus_backend``, so the re-ranking figures keep their own index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path

import numpy as np

from qres import metrics
from qres.backends.base import Backend, BackendError
from qres.corpus import CorpusError, Question, read_corpus
from qres.datasets import (
    LAYOUTS,
    RankingQuery,
    dataset_dir,
    load_android,
    load_askubuntu_eval,
    load_semeval,
    semeval_questions,
)
from qres.indexing import index_questions
from qres.search import MODES, SearchPipeline

DATASETS = ("askubuntu", "semeval2016", "android")
RANKERS = ("given-order", "bm25", "dense", "hybrid", "bow-cnn")
AUC_MAX_FPR = 0.05
AUC_COLUMN = "AUC(0.05)"
# Corpus questions the BOW-CNN scorer compares with all queries at once (bounds memory).
SCORING_CHUNK = 4096


def accuracy_column(k: int) -> str:
    return f"Acc@{k}"


@dataclass
class Evaluation:
    dataset: str
    split: str
    ranker: str
    metrics: dict[str, float | None]
    per_query: list[dict] = field(default_factory=list)


# -- rankers --------------------------------------------------------------------------------


class PipelineRanker:
    """``bm25``, ``dense`` or ``hybrid`` through the production :class:`SearchPipeline`.

    ``corpus_pipeline`` searches the whole corpus for Accuracy@k when that lives in another
    index than the candidates (AskUbuntu); by default it is ``pipeline``.
    """

    def __init__(
        self, pipeline: SearchPipeline, mode: str, corpus_pipeline: SearchPipeline | None = None
    ):
        self.pipeline, self.mode = pipeline, mode
        self.corpus_pipeline = corpus_pipeline or pipeline

    def _vector(self, question: Question, pipeline: SearchPipeline):
        """Evaluation encodes the whole question (title and body), as the index does."""
        if self.mode == "bm25":
            return None
        return pipeline.encoder.encode_questions([question])[0]

    def score(self, query: Question, candidates: Sequence[str]) -> list[tuple[str, float]]:
        """Every candidate with its score, best first; any the index does not return follow,
        in their given order, with score -inf."""
        vector = self._vector(query, self.pipeline)
        pipeline = self._held_out(query.id)
        results = pipeline.search(query.text, len(candidates), self.mode, candidates, vector)
        scored = [(r.id, r.score) for r in results]
        returned = {r.id for r in results}
        return scored + [(c, float("-inf")) for c in candidates if c not in returned]

    def _held_out(self, query_id: str) -> SearchPipeline:
        """A query the fusion was cross-validated on is fused as in its held-out fold."""
        fusion = self.pipeline.fusion
        if self.mode != "hybrid" or fusion.for_query(query_id) is fusion:
            return self.pipeline
        p = self.pipeline
        return SearchPipeline(p.backend, p.encoder, fusion.for_query(query_id), p.candidates)

    def top(self, queries: Sequence[Question], k: int) -> list[list[str]]:
        """The first ``k`` corpus questions of each query, the query itself left out."""
        tops = []
        for query in queries:
            vector = self._vector(query, self.corpus_pipeline)
            results = self.corpus_pipeline.search(query.text, k + 1, self.mode, None, vector)
            tops.append([r.id for r in results if r.id != query.id][:k])
        return tops


class BowCnnRanker:
    """A BOW-CNN scorer's similarity (``scorer.similarity(queries, candidates)`` → [nq, nc]).

    ``texts`` holds the candidates' questions; ``corpus`` yields every corpus question, for
    Accuracy@k.
    """

    def __init__(
        self,
        scorer,
        texts: Mapping[str, Question],
        corpus: Callable[[], Iterable[Question]] | None = None,
        chunk: int = SCORING_CHUNK,
    ):
        self.scorer, self.texts, self.corpus, self.chunk = scorer, texts, corpus, chunk

    def score(self, query: Question, candidates: Sequence[str]) -> list[tuple[str, float]]:
        known = [c for c in candidates if c in self.texts]
        sims = self.scorer.similarity([query], [self.texts[c] for c in known])[0] if known else []
        order = np.argsort(-np.asarray(sims, dtype=float), kind="stable")
        scored = [(known[i], float(sims[i])) for i in order]
        missing = set(candidates) - set(known)
        return scored + [(c, float("-inf")) for c in candidates if c in missing]

    def top(self, queries: Sequence[Question], k: int) -> list[list[str]]:
        """Every query against the corpus, chunk by chunk, keeping each query's best ``k``."""
        if self.corpus is None:
            raise ValueError("Accuracy@k with bow-cnn needs the corpus")
        if not queries:
            return []
        best_scores = np.empty((len(queries), 0))
        best_rows = np.empty((len(queries), 0), dtype=int)
        ids: list[str] = []
        questions = iter(self.corpus())
        while chunk := list(islice(questions, self.chunk)):
            sims = np.asarray(self.scorer.similarity(queries, chunk), dtype=float)
            chunk_ids = [q.id for q in chunk]
            position = {qid: j for j, qid in enumerate(chunk_ids)}
            for i, query in enumerate(queries):
                if query.id in position:
                    sims[i, position[query.id]] = -np.inf
            rows = np.broadcast_to(np.arange(len(ids), len(ids) + len(chunk)), sims.shape)
            ids += chunk_ids
            all_scores = np.hstack([best_scores, sims])
            all_rows = np.hstack([best_rows, rows])
            # Stable, so equal scores keep corpus order.
            keep = np.argsort(-all_scores, axis=1, kind="stable")[:, :k]
            best_scores = np.take_along_axis(all_scores, keep, axis=1)
            best_rows = np.take_along_axis(all_rows, keep, axis=1)
        return [
            [ids[j] for j, s in zip(rows, scores, strict=True) if s != -np.inf]
            for rows, scores in zip(best_rows, best_scores, strict=True)
        ]


def make_ranker(
    ranker: str,
    backend: Backend | None,
    encoder,
    fusion,
    scorer,
    texts: Mapping[str, Question],
    corpus: Callable[[], Iterable[Question]],
    indexed: Callable[[], Iterable[Question]] | None = None,
    corpus_backend: Backend | None = None,
):
    """The ranker object for ``ranker`` (None for given-order).

    ``texts``: the queries' and candidates' questions; ``corpus``: every question Acc@k ranks;
    ``indexed``: what ``backend`` is filled with on first use (default ``corpus``);
    ``corpus_backend``: an index of ``corpus`` apart from ``backend``, for Acc@k.
    """
    if ranker == "given-order":
        return None
    if ranker == "bow-cnn":
        if scorer is None:
            raise BackendError("the bow-cnn ranker needs --model DIR of a BOW-CNN export")
        return BowCnnRanker(scorer, texts, corpus)
    if ranker not in MODES:
        raise ValueError(f"unknown ranker {ranker!r} (one of {', '.join(RANKERS)})")
    ensure_index(backend, indexed or corpus, encoder)
    corpus_pipeline = None
    if corpus_backend is not None:
        ensure_index(corpus_backend, corpus, encoder)
        corpus_pipeline = _pipeline(corpus_backend, encoder, fusion)
    return PipelineRanker(_pipeline(backend, encoder, fusion), ranker, corpus_pipeline)


# -- scoring --------------------------------------------------------------------------------


def given_order(query: RankingQuery) -> list[str]:
    if query.given_scores is None:
        return list(query.candidates)
    by_score = sorted(
        zip(query.given_scores, range(len(query.candidates)), strict=True), key=lambda t: -t[0]
    )
    return [query.candidates[i] for _, i in by_score]


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


def _score(dataset, split, ranker, queries, rankings, skip_without_relevant) -> Evaluation:
    counts = [len(q.relevant) for q in queries]
    summary = metrics.summarize(rankings, counts, skip_without_relevant)
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
        if not (skip_without_relevant and n == 0)
    ]
    return Evaluation(dataset, split, ranker, summary, per_query)


def _evaluate(
    dataset: str,
    split: str,
    name: str,
    queries: list[RankingQuery],
    texts: Mapping[str, Question],
    ranker,
    skip_without_relevant: bool,
    accuracy_at: Sequence[int] = (),
    with_auc: bool = False,
) -> Evaluation:
    rankings, pair_labels, pair_scores = [], [], []
    for q in queries:
        if ranker is None:
            order = given_order(q)
        else:
            scored = ranker.score(_query_question(q, texts), q.candidates)
            order = [c for c, _ in scored]
            pair_labels += [c in q.relevant for c, _ in scored]
            pair_scores += [s for _, s in scored]
        rankings.append([c in q.relevant for c in order])
    evaluation = _score(dataset, split, name, queries, rankings, skip_without_relevant)
    if with_auc:
        evaluation.metrics[AUC_COLUMN] = metrics.auc_percent(
            pair_labels, _lowest_below(pair_scores), AUC_MAX_FPR
        )
    if accuracy_at:
        evaluation.metrics.update(accuracy(ranker, queries, texts, accuracy_at))
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


def ensure_index(
    backend: Backend, questions: Callable[[], Iterable[Question]], encoder=None
) -> None:
    """Fill an evaluation index once (re-used while its model fingerprint matches)."""
    meta = backend.metadata()
    wanted = encoder.fingerprint if encoder is not None else None
    if backend.count() > 0 and meta.get("model_fingerprint") == wanted:
        return
    index_questions(backend, questions(), encoder=encoder)


def evaluate_semeval(
    data_dir: Path,
    split: str,
    ranker: str,
    backend: Backend | None = None,
    encoder=None,
    fusion=None,
    scorer=None,
    accuracy_at: Sequence[int] = (),
) -> Evaluation:
    """``accuracy_at``: Acc@k over every related question of the train and dev files."""
    folder = dataset_dir("semeval2016", data_dir)
    labelled = load_semeval(folder, split)
    corpus = partial(semeval_questions, folder)
    ranking = make_ranker(ranker, backend, encoder, fusion, scorer, labelled.questions, corpus)
    return _evaluate(
        "semeval2016", split, ranker, labelled.queries, {}, ranking, False, accuracy_at
    )


def evaluate_askubuntu(
    data_dir: Path,
    split: str,
    ranker: str,
    backend: Backend | None = None,
    encoder=None,
    fusion=None,
    corpus: Path | None = None,
    scorer=None,
    accuracy_at: Sequence[int] = (),
    corpus_backend: Backend | None = None,
) -> Evaluation:
    """``accuracy_at``: Acc@k over every question of ``corpus``, indexed into
    ``corpus_backend`` (bm25, dense, hybrid) apart from the candidates' ``backend``."""
    folder = dataset_dir("askubuntu", data_dir)
    (split_file,) = LAYOUTS["askubuntu"].files(folder, split)
    queries = load_askubuntu_eval(split_file)
    texts: dict[str, Question] = {}
    if ranker != "given-order":
        if corpus is None:
            raise CorpusError(
                folder,
                None,
                f"ranking with {ranker} needs the question texts: pass --corpus "
                "text_tokenized.txt.gz (from `qres download askubuntu`)",
            )
        needed = {q.id for q in queries} | {c for q in queries for c in q.candidates}
        texts = {q.id: q for q in read_corpus(corpus, "askubuntu") if q.id in needed}
    if accuracy_at and ranker in MODES and corpus_backend is None:
        raise ValueError("Accuracy@k on AskUbuntu needs corpus_backend for the whole corpus")
    ranking = make_ranker(
        ranker,
        backend,
        encoder,
        fusion,
        scorer,
        texts,
        corpus=partial(read_corpus, corpus, "askubuntu"),
        indexed=texts.values,
        corpus_backend=corpus_backend if accuracy_at else None,
    )
    return _evaluate("askubuntu", split, ranker, queries, texts, ranking, True, accuracy_at)


def evaluate_android(
    data_dir: Path,
    split: str,
    ranker: str,
    backend: Backend | None = None,
    encoder=None,
    fusion=None,
    scorer=None,
    accuracy_at: Sequence[int] = (),
) -> Evaluation:
    """AUC(0.05) over every labelled pair of ``split``, MAP/MRR/P@k over each query's
    labelled candidates; the whole corpus is indexed (and is what Acc@k ranks)."""
    if ranker == "given-order":
        raise ValueError(
            "Android pairs have no given order: rank with bm25, dense, hybrid, bow-cnn"
        )
    labelled = load_android(data_dir, split)
    questions = labelled.questions
    ranking = make_ranker(ranker, backend, encoder, fusion, scorer, questions, questions.values)
    return _evaluate(
        "android", split, ranker, labelled.queries, questions, ranking, True, accuracy_at, True
    )


def _pipeline(backend, encoder, fusion) -> SearchPipeline:
    kwargs = {"fusion": fusion} if fusion is not None else {}
    return SearchPipeline(backend, encoder, **kwargs)


def candidate_scores(data_dir: Path, split: str, backend: Backend, encoder):
    """(BM25, cosine, label) arrays of every SemEval ``split`` query's candidates, scored by
    the production pipeline: what :func:`qres.fusion.tune_fusion` learns from."""
    folder = dataset_dir("semeval2016", data_dir)
    labelled = load_semeval(folder, split)
    ensure_index(backend, lambda: semeval_questions(folder), encoder)
    pipeline = SearchPipeline(backend, encoder)
    lists = []
    for q in labelled.queries:
        vector = encoder.encode_questions([q.question])[0]
        results = pipeline.search(q.question.text, len(q.candidates), "dense", q.candidates, vector)
        results = [r for r in results if r.cosine is not None]
        lists.append(
            (
                np.array([r.bm25 for r in results]),
                np.array([r.cosine for r in results]),
                np.array([r.id in q.relevant for r in results], dtype=int),
            )
        )
    return lists
