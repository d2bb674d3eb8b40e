"""Rerank each dev query's candidates by cosine similarity and score MAP, MRR, P@1, P@5.

``encode`` is any function from questions to unit vectors [n, dim]: the torch model during
training, or ``qres.encoders.runtime.Encoder.encode_questions`` for an exported model, so the same
code scores both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from qres.corpus.readers import Question
from qres.datasets.benchmarks import RankingQuery
from qres.evaluation.ranking_metrics import summarize

Encode = Callable[[Sequence[Question]], np.ndarray]
# (represented questions, query row, candidate rows) -> candidate scores
Score = Callable[[object, int, list[int]], np.ndarray]


def cosine(vectors: np.ndarray, query: int, candidates: list[int]) -> np.ndarray:
    return vectors[candidates] @ vectors[query]


def rank_candidates(
    queries: Sequence[RankingQuery],
    questions: dict[str, Question],
    encode: Encode,
    score: Score = cosine,
) -> list[list[bool]]:
    """Per query, the relevance of its candidates sorted by descending score (stable).

    ``encode`` represents every question once (unit vectors by default, scored by cosine);
    a scorer with its own representation passes its ``score`` too (BOW-CNN).
    """
    ids = list(dict.fromkeys(i for q in queries for i in (q.id, *q.candidates)))
    own = {q.id: q.question for q in queries if q.question is not None}
    texts = [questions[i] if i in questions else own[i] for i in ids]
    represented = encode(texts)
    row = {qid: n for n, qid in enumerate(ids)}
    rankings = []
    for q in queries:
        scores = score(represented, row[q.id], [row[c] for c in q.candidates])
        order = np.argsort(-np.asarray(scores), kind="stable")
        rankings.append([q.candidates[i] in q.relevant for i in order])
    return rankings


def evaluate(
    queries: Sequence[RankingQuery],
    questions: dict[str, Question],
    encode: Encode,
    skip_without_relevant: bool,
    score: Score = cosine,
) -> dict[str, float]:
    """MAP, MRR, P@1, P@5 in percent (and the number of queries scored)."""
    rankings = rank_candidates(queries, questions, encode, score)
    return summarize(rankings, skip_without_relevant=skip_without_relevant)
