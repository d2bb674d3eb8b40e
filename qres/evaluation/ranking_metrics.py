"""Ranking metrics of the question-retrieval papers qres reproduces.

Every function takes one query's ranking as a sequence of booleans, ``ranked[i]`` telling
whether the candidate at rank ``i + 1`` is relevant. Definitions:

* AP (average precision) = (1 / R) · Σ_{i : ranked[i]} P@(i+1), where R is the number of
  relevant candidates of the query (``n_relevant``; by default the number in ``ranked``, which
  is R whenever every relevant candidate is ranked, as in AskUbuntu and SemEval). A query with
  R = 0 has AP 0.
* RR (reciprocal rank) = 1 / rank of the first relevant candidate; 0 if none.
* P@k = (relevant among the first k) / k; a list shorter than k counts the missing ranks as
  not relevant, as trec_eval does.
* AUC(f) for pairwise data: the area under the ROC curve from false-positive rate 0 to ``f``,
  divided by ``f`` (1.0 is perfect, ``f/2`` random), the AUC(0.05) of the Android transfer
  experiments.

Full-forum retrieval (CQADupStack/BEIR convention, binary gains; ``ranked`` is the top of
the whole forum, ``n_relevant`` = R, the query's relevant questions):

* Recall@k = (relevant among the first k) / R;
* RR@k (MRR@k over queries) = 1 / rank of the first relevant within the first k, else 0;
* nDCG@k = DCG@k / IDCG@k with DCG@k = Σ_{i<k, ranked[i]} 1 / log2(i + 2) and IDCG@k the
  DCG of min(R, k) relevant questions at the top (trec_eval's ``ndcg_cut``).

Which queries enter the mean is the dataset's convention, not the metric's: Lei et al. (2016)
drop AskUbuntu queries without a relevant candidate; SemEval-2016 keeps them with AP 0. See
:func:`summarize`. Figures are reported in percent.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def average_precision(ranked: Sequence[bool], n_relevant: int | None = None) -> float:
    hits = np.asarray(ranked, dtype=bool)
    total = int(hits.sum()) if n_relevant is None else n_relevant
    if total == 0:
        return 0.0
    precision_at_hits = np.cumsum(hits)[hits] / (np.flatnonzero(hits) + 1)
    return float(precision_at_hits.sum() / total)


def reciprocal_rank(ranked: Sequence[bool]) -> float:
    first = np.flatnonzero(np.asarray(ranked, dtype=bool))
    return float(1.0 / (first[0] + 1)) if len(first) else 0.0


def precision_at(ranked: Sequence[bool], k: int) -> float:
    return float(np.asarray(ranked[:k], dtype=bool).sum() / k)


def recall_at(ranked: Sequence[bool], k: int, n_relevant: int) -> float:
    if n_relevant == 0:
        return 0.0
    return float(np.asarray(ranked[:k], dtype=bool).sum() / n_relevant)


def reciprocal_rank_at(ranked: Sequence[bool], k: int) -> float:
    return reciprocal_rank(ranked[:k])


def ndcg_at(ranked: Sequence[bool], k: int, n_relevant: int) -> float:
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    hits = np.asarray(ranked[:k], dtype=bool)
    ideal = discounts[: min(n_relevant, k)].sum()
    return float(discounts[: len(hits)][hits].sum() / ideal) if ideal > 0 else 0.0


def summarize(
    rankings: Sequence[Sequence[bool]],
    n_relevant: Sequence[int] | None = None,
    skip_without_relevant: bool = False,
) -> dict[str, float]:
    """MAP, MRR, P@1, P@5 in percent over queries.

    ``skip_without_relevant`` drops queries with no relevant candidate (the AskUbuntu
    convention); otherwise they count with zeros (the SemEval convention).
    """
    counts = list(n_relevant) if n_relevant is not None else [int(sum(r)) for r in rankings]
    kept = [
        (r, n)
        for r, n in zip(rankings, counts, strict=True)
        if not (skip_without_relevant and n == 0)
    ]
    if not kept:
        return {"MAP": 0.0, "MRR": 0.0, "P@1": 0.0, "P@5": 0.0, "queries": 0}
    return {
        "MAP": 100 * float(np.mean([average_precision(r, n) for r, n in kept])),
        "MRR": 100 * float(np.mean([reciprocal_rank(r) for r, _ in kept])),
        "P@1": 100 * float(np.mean([precision_at(r, 1) for r, _ in kept])),
        "P@5": 100 * float(np.mean([precision_at(r, 5) for r, _ in kept])),
        "queries": len(kept),
    }


def auc_at(labels: Sequence[int], scores: Sequence[float], max_fpr: float = 0.05) -> float:
    """Normalised partial ROC AUC up to ``max_fpr`` over all (label, score) pairs."""
    y = np.asarray(labels, dtype=bool)
    s = np.asarray(scores, dtype=float)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("AUC needs at least one positive and one negative pair")
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    # ROC points at each distinct score threshold (ties move both rates together).
    last_of_run = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]
    tpr = np.r_[0.0, np.cumsum(y)[last_of_run] / n_pos]
    fpr = np.r_[0.0, np.cumsum(~y)[last_of_run] / n_neg]
    cut = np.searchsorted(fpr, max_fpr, side="right")
    xs, ys = fpr[:cut], tpr[:cut]
    if cut < len(fpr):  # close the area exactly at max_fpr, interpolating the segment
        x0, x1, y0, y1 = fpr[cut - 1], fpr[cut], tpr[cut - 1], tpr[cut]
        xs = np.r_[xs, max_fpr]
        ys = np.r_[ys, y0 + (y1 - y0) * (max_fpr - x0) / (x1 - x0)]
    return float(np.trapezoid(ys, xs) / max_fpr)


def auc_percent(labels: Sequence[int], scores: Sequence[float], max_fpr: float = 0.05) -> float:
    return 100 * auc_at(labels, scores, max_fpr)
