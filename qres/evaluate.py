"""Benchmark evaluation: re-rank each labelled query's candidates and score the rankings.

Rankers:

* ``given-order`` — the order the dataset ships: AskUbuntu's Lucene BM25 scores, SemEval's
  search-engine order (RELQ_RANKING_ORDER);
* ``bm25``, ``dense``, ``hybrid`` — qres's own :class:`qres.search.SearchPipeline`, the
  production query path, restricted to the query's candidates. The candidates' texts are
  indexed into an evaluation index (SemEval: every related question of the train and dev
  files; AskUbuntu: the corpus file given with ``corpus``).

Conventions (see :mod:`qres.metrics`): AskUbuntu drops queries without a relevant candidate
(Lei et al. 2016); SemEval-2016 keeps them with AP 0 (the official scorer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from qres import metrics
from qres.backends.base import Backend, BackendError
from qres.corpus import CorpusError, Question, read_corpus
from qres.datasets import (
    LabelledSet,
    RankingQuery,
    load_askubuntu_eval,
    load_semeval_csv,
    load_semeval_xml,
)
from qres.indexing import index_questions
from qres.search import SearchPipeline

DATASETS = ("askubuntu", "semeval2016")
RANKERS = ("given-order", "bm25", "dense", "hybrid")
# Each file of a split, as laid out in ../shared/data or as `qres download` leaves it.
SEMEVAL_FILES = {
    "train": [
        (
            "semeval2016-task3/train-part1-subtaskB.csv",
            "semeval2016/v3.2/train/SemEval2016-Task3-CQA-QL-train-part1.xml",
        ),
        (
            "semeval2016-task3/SemEval2016-Task3-CQA-QL-train-part2.xml",
            "semeval2016/v3.2/train/SemEval2016-Task3-CQA-QL-train-part2.xml",
        ),
    ],
    "dev": [
        (
            "semeval2016-task3/SemEval2016-Task3-CQA-QL-dev.xml",
            "semeval2016/v3.2/dev/SemEval2016-Task3-CQA-QL-dev.xml",
        )
    ],
}


def semeval_path(data_dir: Path, options: tuple[str, ...]) -> Path:
    for relative in options:
        if (data_dir / relative).exists():
            return data_dir / relative
    raise CorpusError(
        data_dir / options[0], None, "not found: run `qres download semeval2016` or pass --data-dir"
    )


@dataclass
class Evaluation:
    dataset: str
    split: str
    ranker: str
    metrics: dict[str, float]
    per_query: list[dict] = field(default_factory=list)


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


def load_semeval(data_dir: Path, split: str) -> LabelledSet:
    queries, questions = [], {}
    if split not in SEMEVAL_FILES:
        raise CorpusError(data_dir, None, f"SemEval-2016 subtask B has no {split} split here")
    for options in SEMEVAL_FILES[split]:
        path = semeval_path(data_dir, options)
        labelled = load_semeval_csv(path) if path.suffix == ".csv" else load_semeval_xml(path)
        queries += labelled.queries
        questions.update(labelled.questions)
    return LabelledSet(queries, questions)


def semeval_questions(data_dir: Path) -> Iterable[Question]:
    """Every related question of the SemEval-2016 subtask B files (train and dev)."""
    for split in ("train", "dev"):
        yield from load_semeval(data_dir, split).questions.values()


def ensure_index(
    backend: Backend, questions: Callable[[], Iterable[Question]], encoder=None
) -> None:
    """Fill an evaluation index once (re-used while its model fingerprint matches)."""
    meta = backend.metadata()
    wanted = encoder.fingerprint if encoder is not None else None
    if backend.count() > 0 and meta.get("model_fingerprint") == wanted:
        return
    index_questions(backend, questions(), encoder=encoder)


def rerank(pipeline: SearchPipeline, query_text: str, candidates: list[str], mode: str, vector):
    """Candidates ordered by the pipeline; any the index lacks keep their given order last."""
    results = pipeline.search(query_text, len(candidates), mode, candidates, vector)
    ranked = [r.id for r in results]
    seen = set(ranked)
    return ranked + [c for c in candidates if c not in seen]


def _rank_all(queries: list[RankingQuery], ranker: str, pipeline, texts) -> list[list[bool]]:
    rankings = []
    for q in queries:
        if ranker == "given-order":
            order = q.candidates
            if q.given_scores is not None:
                by_score = sorted(
                    zip(q.given_scores, range(len(q.candidates)), strict=True), key=lambda t: -t[0]
                )
                order = [q.candidates[i] for _, i in by_score]
        else:
            question = q.question or texts.get(q.id)
            if question is None:
                raise BackendError(f"query {q.id} is not in the corpus given with --corpus")
            vector = None
            if ranker != "bm25":
                vector = pipeline.encoder.encode_questions([question])[0]
            order = rerank(pipeline, question.text, q.candidates, ranker, vector)
        rankings.append([c in q.relevant for c in order])
    return rankings


def evaluate_semeval(
    data_dir: Path,
    split: str,
    ranker: str,
    backend: Backend | None = None,
    encoder=None,
    fusion=None,
) -> Evaluation:
    labelled = load_semeval(data_dir, split)
    pipeline = None
    if ranker != "given-order":
        ensure_index(backend, lambda: semeval_questions(data_dir), encoder)
        pipeline = _pipeline(backend, encoder, fusion)
    rankings = _rank_all(labelled.queries, ranker, pipeline, {})
    return _score("semeval2016", split, ranker, labelled.queries, rankings, False)


def evaluate_askubuntu(
    data_dir: Path,
    split: str,
    ranker: str,
    backend: Backend | None = None,
    encoder=None,
    fusion=None,
    corpus: Path | None = None,
) -> Evaluation:
    queries = load_askubuntu_eval(data_dir / "askubuntu" / f"{split}.txt")
    pipeline, texts = None, {}
    if ranker != "given-order":
        if corpus is None:
            raise CorpusError(
                data_dir / "askubuntu",
                None,
                f"ranking with {ranker} needs the question texts: pass --corpus "
                "text_tokenized.txt.gz (from `qres download askubuntu`)",
            )
        needed = {q.id for q in queries} | {c for q in queries for c in q.candidates}
        texts = {q.id: q for q in read_corpus(corpus, "askubuntu") if q.id in needed}
        ensure_index(backend, lambda: texts.values(), encoder)
        pipeline = _pipeline(backend, encoder, fusion)
    rankings = _rank_all(queries, ranker, pipeline, texts)
    return _score("askubuntu", split, ranker, queries, rankings, True)


def _pipeline(backend, encoder, fusion) -> SearchPipeline:
    kwargs = {"fusion": fusion} if fusion is not None else {}
    return SearchPipeline(backend, encoder, **kwargs)


def candidate_scores(data_dir: Path, split: str, backend: Backend, encoder):
    """(BM25, cosine, label) arrays of every SemEval ``split`` query's candidates, scored by
    the production pipeline: what :func:`qres.fusion.tune_fusion` learns from."""
    import numpy as np

    labelled = load_semeval(data_dir, split)
    ensure_index(backend, lambda: semeval_questions(data_dir), encoder)
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
