"""Scoring suggested tags: P@5, R@5 and MAP of each question's tags ranked by a tag head's
scores (:mod:`qres.encoders.tag_head`), as ``qres train --tags`` reports them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qres.evaluation import ranking_metrics as metrics

TAG_METRICS = ("P@5", "R@5", "MAP")


def tag_metrics(scores: np.ndarray, gold: Sequence[Sequence[str]], labels: Sequence[str]) -> dict:
    """P@5, R@5 and MAP (percent) of each question's tags ranked by score.

    ``scores`` is [questions, len(labels)]; a gold tag missing from ``labels`` still counts in
    the recall and AP denominators (the model cannot suggest it). Questions without gold
    tags are left out.
    """
    p5, r5, aps = [], [], []
    for row, tags in zip(scores, gold, strict=True):
        wanted = set(tags)
        if not wanted:
            continue
        ranking = [labels[i] in wanted for i in np.argsort(-row, kind="stable")]
        hits = sum(ranking[:5])
        p5.append(metrics.precision_at(ranking, 5))
        r5.append(hits / len(wanted))
        aps.append(metrics.average_precision(ranking, len(wanted)))
    return {
        "P@5": 100 * float(np.mean(p5)) if p5 else 0.0,
        "R@5": 100 * float(np.mean(r5)) if r5 else 0.0,
        "MAP": 100 * float(np.mean(aps)) if aps else 0.0,
        "questions": len(aps),
    }
