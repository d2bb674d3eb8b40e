"""How much of a question's title alone a forum's fine-tuned model mixes into its vectors,
chosen on links its fine-tuning never read (``qres adapt``).

A question's vector is normalise((1 − w) · v(title and body) + w · v(title)), its card's
``title_weight`` w (:mod:`qres.encoders.runtime`). The zero-shot MiniLM ships 0.2, chosen on
the travel forum's train split; fine-tuned on a forum's duplicates, whose last epoch asks
with titles, the model has learnt to read titles already, and the travel set ranked its
held-out tenth best with none mixed in (benchmarks/adapt_title_weight.json). So ``adapt``
measures each of :data:`WEIGHTS` on the held-out links, each duplicate ranking the forum by
exact cosine with its whole question and with its title alone, and keeps the best mean.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qres.evaluation.ranking_metrics import ndcg_at
from qres.training.import_encoder import TITLE_WEIGHT

WEIGHTS = (0.0, 0.1, 0.2, 0.3)


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def mean_ndcg(asked: np.ndarray, forum: np.ndarray, own: list[int], relevant: list[set[int]]):
    """Mean nDCG@10 (percent) of ranking ``forum``'s rows by cosine with each row of
    ``asked``, the query's own row left out."""
    scores = []
    for row, self_at, wanted in zip(asked @ forum.T, own, relevant, strict=True):
        row[self_at] = -np.inf
        top = np.argpartition(-row, 10)[:10] if len(row) > 10 else np.arange(len(row))
        ranked = [int(i) in wanted for i in top[np.argsort(-row[top], kind="stable")]]
        scores.append(ndcg_at(ranked, 10, len(wanted)))
    return 100 * float(np.mean(scores))


def choose(encoder, questions: Sequence, queries: Sequence, weights=WEIGHTS):
    """The weight of ``weights`` whose ranking of ``questions`` is best for ``queries``
    (:class:`~qres.datasets.benchmarks.RankingQuery`, each one of ``questions``) on the mean
    of their two forms (a tie: the zero-shot weight), and each weight's nDCG@10 by form."""
    at = {q.id: i for i, q in enumerate(questions)}
    texts = encoder.encode_texts([q.text for q in questions])  # read as titles: never mixed
    titles = encoder.encode_texts([q.title or q.text for q in questions])
    own = [at[q.id] for q in queries]
    relevant = [{at[r] for r in q.relevant if r in at} for q in queries]
    table = {}
    for w in weights:
        mixed = _unit((1 - w) * texts + w * titles)
        table[w] = {
            "question": round(mean_ndcg(mixed[own], mixed, own, relevant), 2),
            "title": round(mean_ndcg(titles[own], mixed, own, relevant), 2),
        }
    best = max(weights, key=lambda w: (sum(table[w].values()), w == TITLE_WEIGHT))
    return best, table
