"""Paired significance of a MAP difference (qres.evaluation.significance), against hand-computed
cases and
an independent numpy computation of the same definitions."""

import itertools

import numpy as np
import pytest

from qres.evaluation.significance import compare


def aps(values):
    return {f"q{i}": float(v) for i, v in enumerate(values)}


def test_randomization_p_value_by_hand():
    # d = (1, 2, 3), |mean| = 2. Of the 8 sign assignments only (+,+,+) and (-,-,-) reach
    # |mean| >= 2, so the exact two-sided p is 2/8.
    c = compare("a", aps([0, 0, 0]), "b", aps([1, 2, 3]))
    assert (c.queries, c.map_a, c.map_b, c.difference) == (3, 0.0, 2.0, 2.0)
    assert c.p_value == pytest.approx(0.25)


def test_bootstrap_interval_by_hand():
    # d = (0, 10): a resample of two queries has mean 0 (1/4), 5 (1/2) or 10 (1/4), so the
    # 2.5th and 97.5th percentiles are 0 and 10.
    c = compare("a", aps([50, 50]), "b", aps([50, 60]))
    assert (c.ci_low, c.ci_high) == (0.0, 10.0)
    assert c.difference == 5.0


def test_same_difference_on_every_query_has_a_point_interval():
    c = compare("a", aps([10, 20, 30, 40]), "b", aps([13, 23, 33, 43]))
    assert (c.ci_low, c.ci_high) == pytest.approx((3.0, 3.0))
    assert c.p_value == pytest.approx(2 / 2**4)  # only all-plus and all-minus reach |3|


def test_exact_p_value_equals_full_enumeration():
    rng = np.random.default_rng(7)
    a, b = rng.uniform(0, 100, 12), rng.uniform(0, 100, 12)
    d = b - a
    means = [np.mean(d * s) for s in itertools.product([1, -1], repeat=len(d))]
    expected = np.mean(np.abs(means) >= abs(d.mean()) - 1e-12)
    assert compare("a", aps(a), "b", aps(b)).p_value == pytest.approx(expected)


def test_monte_carlo_figures_match_an_independent_computation():
    rng = np.random.default_rng(3)
    a = rng.uniform(20, 80, 60)
    b = np.clip(a + rng.normal(2.0, 10.0, 60), 0, 100)
    d = b - a
    c = compare("a", aps(a), "b", aps(b), resamples=20_000, seed=1)
    draws = np.random.default_rng(99)
    signs = draws.choice([-1.0, 1.0], size=(100_000, len(d)))
    p = (1 + np.sum(np.abs((signs * d).mean(axis=1)) >= abs(d.mean()))) / (1 + len(signs))
    boot = d[draws.integers(0, len(d), size=(100_000, len(d)))].mean(axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    assert c.p_value == pytest.approx(p, abs=0.01)
    assert c.ci_low == pytest.approx(low, abs=0.1) and c.ci_high == pytest.approx(high, abs=0.1)
    assert c.ci_low < c.difference < c.ci_high


def test_rankers_must_score_the_same_queries():
    with pytest.raises(ValueError, match="different queries"):
        compare("a", {"q1": 1.0}, "b", {"q2": 1.0})
