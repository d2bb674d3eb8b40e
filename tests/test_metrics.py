"""Ranking metrics: hand-worked examples and cross-checks with trec_eval and scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
import pytrec_eval
from sklearn.metrics import roc_auc_score

from qres.evaluation.ranking_metrics import (
    auc_at,
    auc_percent,
    average_precision,
    precision_at,
    reciprocal_rank,
    summarize,
)

# --- hand-computed examples -------------------------------------------------------------------


def test_average_precision_by_hand():
    # Relevant at ranks 1, 3, 6: P@1 = 1/1, P@3 = 2/3, P@6 = 3/6 → (1 + 2/3 + 1/2) / 3 = 13/18.
    ranked = [True, False, True, False, False, True]
    assert average_precision(ranked) == pytest.approx(13 / 18, abs=1e-12)
    # Two more relevant candidates were never ranked: the same sum over R = 5 → 13/6 / 5 = 13/30.
    assert average_precision(ranked, n_relevant=5) == pytest.approx(13 / 30, abs=1e-12)
    # One relevant at rank 4 → P@4 = 1/4.
    assert average_precision([False, False, False, True]) == pytest.approx(0.25, abs=1e-12)
    assert average_precision([True, True, True]) == 1.0
    assert average_precision([False, False]) == 0.0
    assert average_precision([]) == 0.0


def test_reciprocal_rank_by_hand():
    assert reciprocal_rank([False, False, True, True]) == pytest.approx(1 / 3, abs=1e-12)
    assert reciprocal_rank([True, False]) == 1.0
    assert reciprocal_rank([False] * 5) == 0.0
    assert reciprocal_rank([]) == 0.0


def test_precision_at_by_hand():
    ranked = [True, False, True, True, False, True]
    assert precision_at(ranked, 1) == 1.0  # 1/1
    assert precision_at(ranked, 2) == 0.5  # 1/2
    assert precision_at(ranked, 5) == pytest.approx(0.6, abs=1e-12)  # 3/5
    # Only 3 candidates: the 2 missing ranks count as not relevant → 2/5, as trec_eval does.
    assert precision_at([True, False, True], 5) == pytest.approx(0.4, abs=1e-12)


def test_summarize_by_hand():
    rankings = [
        [False, True, False, False, False],  # AP 1/2, RR 1/2, P@1 0, P@5 1/5
        [True, False, True, False, False],  # AP (1 + 2/3)/2 = 5/6, RR 1, P@1 1, P@5 2/5
        [False, False, False, False, False],  # no relevant candidate: all 0
    ]
    kept = summarize(rankings)
    assert kept["queries"] == 3
    assert kept["MAP"] == pytest.approx(100 * (1 / 2 + 5 / 6) / 3)
    assert kept["MRR"] == pytest.approx(100 * (1 / 2 + 1) / 3)
    assert kept["P@1"] == pytest.approx(100 / 3)
    assert kept["P@5"] == pytest.approx(100 * (1 / 5 + 2 / 5) / 3)

    dropped = summarize(rankings, skip_without_relevant=True)
    assert dropped["queries"] == 2
    assert dropped["MAP"] == pytest.approx(100 * (1 / 2 + 5 / 6) / 2)
    assert dropped["MRR"] == pytest.approx(100 * (1 / 2 + 1) / 2)
    assert dropped["P@1"] == pytest.approx(50.0)
    assert dropped["P@5"] == pytest.approx(100 * (1 / 5 + 2 / 5) / 2)


def test_summarize_with_n_relevant():
    # Query 1: relevant at rank 2 of R = 2 → AP 1/4. Query 2: R = 0 given, so it is dropped
    # (skip) although its ranking has a hit; kept, it has AP 0 but RR 1.
    rankings = [[False, True, False], [True, False]]
    dropped = summarize(rankings, n_relevant=[2, 0], skip_without_relevant=True)
    assert dropped["queries"] == 1
    assert dropped["MAP"] == pytest.approx(25.0)
    kept = summarize(rankings, n_relevant=[2, 0])
    assert (kept["MAP"], kept["MRR"]) == (pytest.approx(12.5), pytest.approx(75.0))
    with pytest.raises(ValueError):
        summarize(rankings, n_relevant=[1])


def test_summarize_nothing_left():
    assert summarize([[False, False]], skip_without_relevant=True)["queries"] == 0
    assert summarize([])["queries"] == 0


# --- cross-check with trec_eval ---------------------------------------------------------------


def test_summary_matches_trec_eval_on_random_queries():
    rng = np.random.default_rng(20160612)
    qrels, run, rankings, n_relevant = {}, {}, [], []
    for q in range(200):
        n = int(rng.integers(1, 31))
        labels = rng.random(n) < rng.uniform(0.0, 0.6)
        scores = rng.permutation(n) + rng.random()  # distinct scores: trec_eval breaks no ties
        unranked = int(rng.integers(0, 3))  # relevant candidates the run never retrieved
        docs = [f"d{i}" for i in range(n)]
        qrels[f"q{q}"] = {d: int(y) for d, y in zip(docs, labels, strict=True)}
        qrels[f"q{q}"].update({f"missing{i}": 1 for i in range(unranked)})
        run[f"q{q}"] = {d: float(s) for d, s in zip(docs, scores, strict=True)}
        order = np.argsort(-scores)
        rankings.append(labels[order].tolist())
        n_relevant.append(int(labels.sum()) + unranked)
    assert 0 in n_relevant  # some queries have no relevant candidate at all

    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"map", "recip_rank", "P.1,5"})
    per_query = evaluator.evaluate(run)
    trec = {
        name: 100 * float(np.mean([per_query[f"q{q}"][measure] for q in range(200)]))
        for name, measure in (("MAP", "map"), ("MRR", "recip_rank"), ("P@1", "P_1"), ("P@5", "P_5"))
    }
    ours = summarize(rankings, n_relevant=n_relevant)
    assert ours["queries"] == 200
    for name, value in trec.items():
        assert ours[name] == pytest.approx(value, abs=1e-9), name
    for q, (ranked, total) in enumerate(zip(rankings, n_relevant, strict=True)):
        assert average_precision(ranked, total) == pytest.approx(
            per_query[f"q{q}"]["map"], abs=1e-9
        )


# --- AUC(0.05) --------------------------------------------------------------------------------


def raw_partial_auc_from_sklearn(labels, scores, max_fpr):
    """Undo scikit-learn's McClish standardisation and normalise the area by max_fpr."""
    standardised = roc_auc_score(labels, scores, max_fpr=max_fpr)
    min_area, max_area = max_fpr**2 / 2, max_fpr
    raw = min_area + (2 * standardised - 1) * (max_area - min_area)
    return raw / max_fpr


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("max_fpr", [0.05, 0.1, 0.3])
def test_auc_at_matches_sklearn(ties, max_fpr):
    rng = np.random.default_rng(7 + ties)
    for _ in range(20):
        n = int(rng.integers(50, 400))
        labels = (rng.random(n) < rng.uniform(0.05, 0.5)).astype(int)
        labels[:2] = [0, 1]
        scores = rng.normal(size=n) + labels * rng.uniform(0, 2)
        if ties:
            scores = np.round(scores, 1)  # many equal scores across both classes
        expected = raw_partial_auc_from_sklearn(labels, scores, max_fpr)
        assert auc_at(labels, scores, max_fpr) == pytest.approx(expected, abs=1e-9)
    if ties:
        assert len(np.unique(scores)) < n


def test_auc_at_by_hand():
    # 2 positives, 4 negatives, ranked + - + - - -. ROC: (0, 1/2), (1/4, 1/2), (1/4, 1), (1, 1).
    # Up to FPR 1/2: 1/4 · 1/2 + 1/4 · 1 = 3/8, divided by 1/2 → 3/4.
    labels, scores = [1, 0, 1, 0, 0, 0], [6, 5, 4, 3, 2, 1]
    assert auc_at(labels, scores, max_fpr=0.5) == pytest.approx(0.75, abs=1e-12)
    # Up to FPR 0.05 the curve is flat at TPR 1/2.
    assert auc_at(labels, scores) == pytest.approx(0.5, abs=1e-12)
    assert auc_percent(labels, scores) == pytest.approx(50.0, abs=1e-10)


def test_auc_at_perfect_and_worst_ranking():
    labels = [1, 1, 1, 0, 0, 0, 0]
    scores = [0.9, 0.8, 0.7, 0.3, 0.2, 0.1, 0.0]
    assert auc_at(labels, scores) == 1.0
    assert auc_at(labels, [-s for s in scores]) == 0.0


def test_auc_at_needs_both_classes():
    with pytest.raises(ValueError, match="positive and one negative"):
        auc_at([1, 1, 1], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="positive and one negative"):
        auc_at([0, 0], [0.1, 0.2])
