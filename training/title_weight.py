"""How much of a question's title alone a forum's fine-tuned model mixes into its vectors,
chosen on links its fine-tuning never read (``qres adapt``).

A question's vector is normalise((1 − w) · v(title and body) + w · v(title)), its card's
``title_weight`` w (:mod:`qres.encoders.runtime`). The zero-shot MiniLM ships 0.2, chosen on
the travel forum's train split; fine-tuned on a forum's duplicates, whose last epoch asks
with titles, the model has learnt to read titles already, and the travel set ranked its
held-out tenth best with none mixed in (benchmarks/adapt_title_weight.json). So ``adapt``
measures each of :data:`WEIGHTS` on the held-out links, each duplicate ranking the forum by
exact cosine with its whole question and with its title alone, and keeps the best mean.
The same measures serve ``benchmarks/title_weight.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qres.evaluation.ranking_metrics import ndcg_at, recall_at
from qres.training.import_encoder import TITLE_WEIGHT

WEIGHTS = (0.0, 0.1, 0.2, 0.3)
FORMS = ("question", "title")


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def cosines(texts: np.ndarray, titles: np.ndarray, w: float, form: str, own: list[int]):
    """The cosine of each query (the rows ``own``, asking with ``form``) with every question,
    the questions' vectors their whole texts' mixed with their titles' at weight ``w``."""
    mixed = unit((1 - w) * texts + w * titles)
    asked = mixed[own] if form == "question" else titles[own]
    return asked @ mixed.T


def scores(cosines: np.ndarray, own: list[int], relevant: list[set[int]]) -> dict[str, float]:
    """Mean nDCG@10 and R@100 (percent) of ranking each row's columns, its own left out."""
    ndcg, recall = [], []
    for row, self_at, wanted in zip(cosines, own, relevant, strict=True):
        row = row.copy()
        row[self_at] = -np.inf
        top = np.argpartition(-row, 100)[:100] if len(row) > 100 else np.arange(len(row))
        ranked = [int(i) in wanted for i in top[np.argsort(-row[top], kind="stable")]]
        ndcg.append(ndcg_at(ranked, 10, len(wanted)))
        recall.append(recall_at(ranked, 100, len(wanted)))
    return {
        "nDCG@10": round(100 * float(np.mean(ndcg)), 2),
        "R@100": round(100 * float(np.mean(recall)), 2),
    }


def choose(encoder, questions: Sequence, queries: Sequence, weights=WEIGHTS, progress=None):
    """The weight of ``weights`` whose ranking of ``questions`` is best for ``queries``
    (:class:`~qres.datasets.benchmarks.RankingQuery`, each one of ``questions``) on the mean
    of their two forms (a tie: the zero-shot weight), and each weight's nDCG@10 by form.
    ``progress(n)`` is told of the texts encoded, two a question."""
    at = {q.id: i for i, q in enumerate(questions)}
    # each read as a title alone, so never mixed with another
    texts = encoder.encode_texts([q.text for q in questions], progress=progress)
    titles = encoder.encode_texts([q.title or q.text for q in questions], progress=progress)
    own = [at[q.id] for q in queries]
    relevant = [{at[r] for r in q.relevant if r in at} for q in queries]
    table = {
        w: {
            form: scores(cosines(texts, titles, w, form, own), own, relevant)["nDCG@10"]
            for form in FORMS
        }
        for w in weights
    }
    best = max(weights, key=lambda w: (sum(table[w].values()), w == TITLE_WEIGHT))
    return best, table
