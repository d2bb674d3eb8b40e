"""Is ranker B's MAP really different from ranker A's? Two paired tests over queries.

Both rankers score the same n queries; d_i = AP_B(i) − AP_A(i) (percentage points) and the
observed difference is Δ = mean(d) = MAP_B − MAP_A. Queries are the unit of sampling, as in
Sakai (2014) and Smucker, Allan & Carterette (2007).

* **Paired bootstrap** (percentile interval): draw n queries with replacement, ``resamples``
  times; Δ*_b is the mean of the drawn d_i. The 95% interval is the 2.5th and 97.5th
  percentiles of the Δ*_b. Resampling the pairs (not each ranker's APs apart) keeps the
  per-query correlation of the two rankers.
* **Paired randomization test** (two-sided): under H0 the two rankers are exchangeable on
  every query, so each d_i keeps or flips its sign with probability 1/2. The p-value is the
  share of sign assignments whose |mean| is at least |Δ|: exact over all 2^n assignments when
  2^n ≤ ``resamples``, otherwise estimated from ``resamples`` random ones as
  (1 + hits) / (1 + resamples), which never reports 0.

Both come from ``scipy.stats`` (``bootstrap``, ``permutation_test`` with
``permutation_type="samples"``, which sign-flips a single paired sample), seeded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

RESAMPLES = 10_000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    queries: int
    map_a: float
    map_b: float
    difference: float  # MAP_B − MAP_A, percentage points
    ci_low: float
    ci_high: float
    p_value: float
    resamples: int
    seed: int


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def compare(
    a: str,
    ap_a: Mapping[str, float],
    b: str,
    ap_b: Mapping[str, float],
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Comparison:
    """The paired bootstrap interval and randomization p-value of MAP_B − MAP_A.

    ``ap_a`` and ``ap_b`` map each query id to its AP; both must hold the same queries.
    """
    if set(ap_a) != set(ap_b):
        raise ValueError(f"{a} and {b} scored different queries: a paired test needs the same")
    if not ap_a:
        raise ValueError("no queries to compare")
    ids = sorted(ap_a)
    x = np.array([ap_a[i] for i in ids], dtype=float)
    y = np.array([ap_b[i] for i in ids], dtype=float)
    d = y - x
    if np.all(d == d[0]):  # no spread: every resample has the same mean (scipy gives NaN)
        low = high = float(d[0])
    else:
        interval = stats.bootstrap(
            (d,),
            _mean,
            n_resamples=resamples,
            confidence_level=CONFIDENCE,
            method="percentile",
            rng=np.random.default_rng(seed),
        ).confidence_interval
        low, high = float(interval.low), float(interval.high)
    p = stats.permutation_test(
        (d,),
        _mean,
        permutation_type="samples",
        n_resamples=resamples,
        alternative="two-sided",
        vectorized=True,
        rng=np.random.default_rng(seed),
    ).pvalue
    means = float(x.mean()), float(y.mean()), float(d.mean())
    return Comparison(a, b, len(ids), *means, low, high, float(p), resamples, seed)
