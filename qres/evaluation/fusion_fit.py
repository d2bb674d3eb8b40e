"""Learning how to fuse BM25 with one or more cosines, measured by k-fold cross-validation.

Every labelled query is a :class:`CandidateList`: its candidates' signals ``x`` [n, 1 + M]
(column 0 BM25 divided by the query's top BM25, then one cosine per model) and 0/1 labels.
Three fusions are compared:

* ``weighted-sum`` — ``x @ w`` with ``w`` on the simplex, chosen on a grid (step 1/20) to
  maximise MAP directly (MAP is what the papers rank by);
* ``rrf`` — reciprocal-rank fusion, Σ_s 1 / (60 + rank_s), nothing learned (Cormack et al.
  2009's constant);
* ``pairwise-linear`` — a small learning-to-rank model: a linear scorer over the signals and
  their reciprocal ranks, fitted with the pairwise logistic (RankNet) loss on every
  (relevant, non-relevant) pair of a query, L2-regularised.

Folds are drawn by query (one SemEval query is one original question, so its ten candidates
never straddle folds); each query is scored by the fusion fitted on the other folds, and the
cross-validated MAP is the mean of those out-of-fold APs.

Queries may come from two sources: SemEval's re-ranking of ten given candidates and a forum's
full-forum search (``qres tune-fusion --forum DIR``). Each source then weighs half in every
fit, however many queries or pairs it has (a forum's train split has some 900 queries of 200
candidates, SemEval dev 50 of 10), and a fusion is judged by the mean of each source's own
measure: MAP on SemEval, nDCG@10 on the forum. Only the fusion is learned here:
the encoders must not have been trained on the queries (use zero-shot models, or keep the
queries an encoder was trained on out with the ``splits`` given to :func:`cross_validate`).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qres.evaluation.ranking_metrics import (
    average_precision,
    ndcg_at,
    precision_at,
    recall_at,
    reciprocal_rank,
)
from qres.ranking.fusion import METHODS, Fusion, ltr_features, normalize_bm25, score, signals

GRID_STEPS = 20
L2 = 1.0


@dataclass
class CandidateList:
    query_id: str
    split: str
    x: np.ndarray  # [n, 1 + M] float: bm25 / top bm25, then the cosines
    labels: np.ndarray  # [n] bool
    # A forum query's linked originals, also those its candidates missed (None: the labelled
    # candidates are all there is, as on SemEval); with it nDCG@10 and R@10 are scored too.
    relevant: int | None = None
    source: str = "semeval2016"  # or "stackexchange"; each source weighs the same in a fit


# What a fusion is judged by on each source's queries.
MEASURE_OF_SOURCE = {"semeval2016": "MAP", "stackexchange": "nDCG@10"}


def fit(method: str, lists: Sequence[CandidateList]) -> list[float] | None:
    if method == "weighted-sum":
        return _fit_weighted_sum(lists)
    if method == "rrf":
        return None
    if method == "pairwise-linear":
        return _fit_pairwise(lists)
    raise ValueError(f"unknown fusion method {method!r} (one of {', '.join(METHODS)})")


def mean_ap(method: str, params, lists: Sequence[CandidateList]) -> float:
    return float(np.mean([query_metrics(method, params, c)["AP"] for c in lists]))


def query_metrics(method: str, params, c: CandidateList) -> dict[str, float]:
    order = np.argsort(-score(method, params, c.x), kind="stable")
    ranked = c.labels[order]
    found = {
        "AP": average_precision(ranked),
        "RR": reciprocal_rank(ranked),
        "P@1": precision_at(ranked, 1),
    }
    if c.relevant is not None:
        found["nDCG@10"] = ndcg_at(ranked, 10, c.relevant)
        found["R@10"] = recall_at(ranked, 10, c.relevant)
    return found


def _simplex(dims: int, steps: int = GRID_STEPS) -> np.ndarray:
    points = [c for c in itertools.product(range(steps + 1), repeat=dims - 1) if sum(c) <= steps]
    grid = np.array([[*c, steps - sum(c)] for c in points], dtype=float) / steps
    return grid


def _source_weights(lists: Sequence[CandidateList], size) -> list[float]:
    """Each list's weight in a fit, so that every source's ``size`` (queries, or pairs) adds up
    to the same; all 1 for a single source, so that fit is what it always was."""
    totals: dict[str, float] = {}
    for c in lists:
        totals[c.source] = totals.get(c.source, 0.0) + size(c)
    if len(totals) == 1:
        return [1.0] * len(lists)
    return [1.0 / (len(totals) * totals[c.source]) for c in lists]


def _fit_weighted_sum(lists: Sequence[CandidateList]) -> list[float]:
    """The simplex grid point of best MAP; of tied points, the one nearest their mean."""
    grid = _simplex(lists[0].x.shape[1])
    quality = np.zeros(len(grid))
    for c, weight in zip(lists, _source_weights(lists, lambda c: 1), strict=True):
        scores = c.x @ grid.T  # [n, points]
        order = np.argsort(-scores, axis=0, kind="stable")
        ranked = c.labels[order]  # [n, points]
        total = ranked.sum(axis=0)
        hits = np.cumsum(ranked, axis=0) * ranked / np.arange(1, len(c.labels) + 1)[:, None]
        quality += weight * np.where(total > 0, hits.sum(axis=0) / np.maximum(total, 1), 0.0)
    best = grid[quality >= quality.max() - 1e-9]
    pick = best[np.argmin(np.linalg.norm(best - best.mean(axis=0), axis=1))]
    return [float(v) for v in pick]


def _fit_pairwise(lists: Sequence[CandidateList]) -> list[float]:
    from scipy.optimize import minimize

    diffs, weights = [], []
    pairs = lambda c: int(c.labels.sum()) * int((~c.labels).sum())  # noqa: E731
    for c, weight in zip(lists, _source_weights(lists, pairs), strict=True):
        f = ltr_features(c.x)
        pos, neg = f[c.labels], f[~c.labels]
        if len(pos) and len(neg):
            diffs.append((pos[:, None, :] - neg[None, :, :]).reshape(-1, f.shape[1]))
            weights.append(np.full(len(pos) * len(neg), weight))
    d = np.vstack(diffs)
    p = np.concatenate(weights)
    p /= p.sum()  # a weighted mean over pairs: the plain mean for a single source

    def loss(w):
        margin = d @ w
        value = p @ np.logaddexp(0.0, -margin) + L2 * (w @ w) / len(d)
        grad = -(d * (p / (1.0 + np.exp(margin)))[:, None]).sum(axis=0) + 2 * L2 * w / len(d)
        return value, grad

    w = minimize(loss, np.zeros(d.shape[1]), jac=True, method="L-BFGS-B").x
    return [float(v) for v in w]


def assign_folds(query_ids: Sequence[str], k: int) -> dict[str, int]:
    """Each query to one of ``k`` folds of (nearly) equal size, in the order of a hash of
    its id, so the folds do not depend on file order (nor follow the files' own grouping)."""
    ordered = sorted(query_ids, key=lambda q: hashlib.sha256(q.encode()).hexdigest())
    return {q: i % k for i, q in enumerate(ordered)}


def cross_validate(
    lists: Sequence[CandidateList], k: int = 5, methods: Sequence[str] = METHODS
) -> dict:
    """Out-of-fold per-query metrics and per-fold parameters of each method."""
    fold_of = assign_folds([c.query_id for c in lists], k)
    results = {}
    for method in methods:
        per_fold, per_query = [], {}
        for fold in range(k):
            train = [c for c in lists if fold_of[c.query_id] != fold]
            params = fit(method, train)
            per_fold.append(params)
            for c in lists:
                if fold_of[c.query_id] == fold:
                    per_query[c.query_id] = query_metrics(method, params, c)
        results[method] = {"per_fold": per_fold, "per_query": per_query}
    return {"folds": k, "fold_of": fold_of, "methods": results}


SUMMARY = (("MAP", "AP"), ("MRR", "RR"), ("P@1", "P@1"), ("nDCG@10", "nDCG@10"), ("R@10", "R@10"))


def summary(per_query: dict[str, dict], ids: Sequence[str]) -> dict[str, float]:
    """MAP, MRR, P@1 (and nDCG@10, R@10 of forum queries) in percent over ``ids``."""
    first = per_query[ids[0]] if ids else {}
    return {
        name: 100 * float(np.mean([per_query[q][key] for q in ids]))
        for name, key in SUMMARY
        if key in first
    }


PER_QUERY_KEY = dict(SUMMARY)  # a summary's measure -> the per-query value it averages
# The measure of a fit over two sources: the mean of each one's own (MEASURE_OF_SOURCE).
BALANCED = "balanced"


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n: int = 10000, seed: int = 0):
    """Mean of a − b (percent) and its 95% paired-bootstrap interval over queries."""
    diff = 100 * (np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(n, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(diff.mean()), float(low), float(high)


def semeval_candidate_lists(
    data_dir, splits: Sequence[str], models, query: str = "question"
) -> list[CandidateList]:
    """BM25 and each model's cosine for every candidate of the SemEval ``splits`` queries.

    ``models``: (backend, encoder) pairs, each backend an evaluation index of every SemEval
    related question with that encoder's vectors (filled here if empty or stale). Queries
    are encoded whole (title and body), as ``qres evaluate`` does, or in the ``query`` form
    of :mod:`qres.evaluation.query_form`; BM25 comes from the first backend's restricted
    search, as in the production pipeline.
    """
    from qres.datasets.benchmarks import dataset_dir, load_semeval, semeval_questions
    from qres.evaluation import query_form
    from qres.evaluation.rankers import ensure_index

    folder = dataset_dir("semeval2016", data_dir)
    for backend, encoder in models:
        ensure_index(backend, lambda: semeval_questions(folder), encoder)
    lists = []
    for split in splits:
        queries = load_semeval(folder, split).queries
        asked = [query_form.apply(q.question, query) for q in queries]
        query_vectors = [encoder.encode_questions(asked) for _, encoder in models]
        first = models[0][0]
        for i, q in enumerate(queries):
            hits = first.search(asked[i].text, len(q.candidates), only_ids=q.candidates)
            ids = [h.id for h in hits]
            bm25 = np.array([h.score for h in hits], dtype=np.float64)
            cosines = []
            for (backend, _), vectors in zip(models, query_vectors, strict=True):
                stored, present = backend.vectors(ids)
                cosines.append(np.where(present, stored @ vectors[i], 0.0))
            labels = np.array([c in q.relevant for c in ids], dtype=bool)
            lists.append(CandidateList(q.id, split, signals(bm25, cosines), labels))
    return lists


def candidate_scores(data_dir, split: str, backend, encoder):
    """(BM25, cosine, label) arrays of every SemEval ``split`` query's candidates, scored by
    the production pipeline: what :func:`tune_fusion` learns from."""
    from qres.datasets.benchmarks import dataset_dir, load_semeval, semeval_questions
    from qres.evaluation.rankers import ensure_index
    from qres.ranking.search import SearchPipeline

    folder = dataset_dir("semeval2016", data_dir)
    labelled = load_semeval(folder, split)
    ensure_index(backend, lambda: semeval_questions(folder), encoder)
    pipeline = SearchPipeline(backend, encoder)
    lists = []
    for q in labelled.queries:
        vector = encoder.encode_questions([q.question])[0]
        results = pipeline.search(
            q.question.text, len(q.candidates), "dense", q.candidates, vector, with_text=False
        )
        results = [r for r in results if r.cosine is not None]
        lists.append(
            (
                np.array([r.bm25 for r in results]),
                np.array([r.cosine for r in results]),
                np.array([r.id in q.relevant for r in results], dtype=int),
            )
        )
    return lists


def features(bm25: np.ndarray, cosine: np.ndarray) -> np.ndarray:
    return np.stack([normalize_bm25(bm25), cosine], axis=1)


def tune_fusion(
    lists: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    source: str,
    steps: int = 100,
    tuned_on: str | None = None,
) -> Fusion:
    """The mix (1 - a) · BM25/top + a · cosine that maximises MAP over candidate lists.

    ``lists``: per query, (bm25 scores, cosines, 0/1 labels) of its candidates. ``a`` is
    searched on a grid of ``steps + 1`` points; of equally good values the middle one of
    the best run is taken. MAP is what the papers rank by, so it is optimised directly
    rather than through a pointwise surrogate.
    """
    grid = np.linspace(0.0, 1.0, steps + 1)
    feats = [(features(b, c), labels.astype(bool)) for b, c, labels in lists]
    quality = np.array([_mean_ap(feats, a) for a in grid])
    best = np.flatnonzero(quality >= quality.max() - 1e-12)
    a = float(grid[best[len(best) // 2]])
    return Fusion(
        bm25=1.0 - a,
        cosine=a,
        source=f"{source}; MAP there {100 * quality.max():.2f}",
        tuned_on=tuned_on,
    )


def _mean_ap(feats, a: float) -> float:
    aps = []
    for x, relevant in feats:
        order = np.argsort(-((1 - a) * x[:, 0] + a * x[:, 1]), kind="stable")
        aps.append(average_precision(relevant[order]))
    return float(np.mean(aps))


def compare_fusions(
    lists: Sequence[CandidateList],
    signals: Sequence[str],
    folds: int,
    method: str = "auto",
    measure: str = "MAP",
) -> dict:
    """Every signal alone and every fusion by ``folds``-fold CV over ``lists``, per split.

    ``signals`` names the columns of each list's ``x`` (``bm25`` first, then one per model).
    Returns ``rows`` (ranker → ``all`` and each split → MAP, MRR, P@1, and for a split the
    paired-bootstrap ``measure`` difference against BM25, ``"<measure> vs bm25"``),
    ``per_query`` (ranker → query → metrics), ``chosen`` (``method``, or with ``"auto"`` the
    fusion of best CV ``measure``: MAP, or nDCG@10 for forum queries), its ``params``
    refitted on every query, and ``record``: what a fusion saved from it keeps.

    Lists of two sources are grouped as ``source/split`` (``semeval2016/dev``,
    ``stackexchange/train``), each group compared with BM25 by its source's measure, and
    ``measure`` is ``balanced``: the mean over sources of their measures.
    """
    sources = list(dict.fromkeys(c.source for c in lists))
    if len(sources) > 1:
        measure = BALANCED
        group = lambda c: f"{c.source}/{c.split}"  # noqa: E731
        measure_of = {group(c): MEASURE_OF_SOURCE[c.source] for c in lists}
    else:
        group = lambda c: c.split  # noqa: E731
        measure_of = {c.split: measure for c in lists}
    splits = list(dict.fromkeys(group(c) for c in lists))
    cv = cross_validate(lists, folds)
    per_query = {}
    for i, name in enumerate(signals):
        weights = [1.0 if j == i else 0.0 for j in range(len(signals))]
        per_query[name] = {c.query_id: query_metrics("weighted-sum", weights, c) for c in lists}
    per_query.update({m: r["per_query"] for m, r in cv["methods"].items()})
    ids = {s: [c.query_id for c in lists if group(c) == s] for s in splits}
    of_source = {src: [c.query_id for c in lists if c.source == src] for src in sources}
    every = [c.query_id for c in lists]
    rows = {}
    for name, scores in per_query.items():
        row = {"all": summary(scores, every)}
        for s in splits:
            row[s] = summary(scores, ids[s])
            key = PER_QUERY_KEY[measure_of[s]]
            row[s][f"{measure_of[s]} vs bm25"] = paired_bootstrap(
                [scores[q][key] for q in ids[s]], [per_query["bm25"][q][key] for q in ids[s]]
            )
        if len(sources) > 1:
            row["all"][BALANCED] = float(
                np.mean(
                    [summary(scores, of_source[src])[MEASURE_OF_SOURCE[src]] for src in sources]
                )
            )
        rows[name] = row
    best = max(METHODS, key=lambda m: rows[m]["all"][measure])
    chosen = best if method == "auto" else method
    record = {
        "folds": folds,
        "splits": splits,
        "queries": len(lists),
        "signals": list(signals),
        "fold_of": cv["fold_of"],
        "per_fold": cv["methods"][chosen]["per_fold"],
        "cv_map": {m: rows[m]["all"]["MAP"] for m in METHODS},
        "measure": measure,
        f"cv_{measure}": {m: rows[m]["all"][measure] for m in METHODS},
    }
    return {
        "chosen": chosen,
        "params": fit(chosen, lists),
        "rows": rows,
        "per_query": per_query,
        "record": record,
    }


def comparison_table(result: dict) -> tuple[list[str], list[list[str]]]:
    """:func:`compare_fusions`'s result as a table's headers and rows of text: each ranker's
    measure, MRR and difference to BM25 per split (and their mean over two sources)."""
    groups, overall = result["record"]["splits"], result["record"]["measure"]
    measure_of = {g: MEASURE_OF_SOURCE.get(g.partition("/")[0], overall) for g in groups}
    headers = ["ranker"] + (
        ["mean of both" if overall == BALANCED else overall] * (len(groups) > 1)
    )
    for g in groups:
        headers += [f"{g} {measure_of[g]}", f"{g} MRR", f"{g} Δ{measure_of[g]} vs bm25 [95% CI]"]
    rows = []
    for name, row in result["rows"].items():
        cells = [name + (" (kept)" if name == result["chosen"] else "")]
        cells += [f"{row['all'][overall]:.2f}"] * (len(groups) > 1)
        for g in groups:
            d, lo, hi = row[g][f"{measure_of[g]} vs bm25"]
            cells += [f"{row[g][measure_of[g]]:.2f}", f"{row[g]['MRR']:.2f}"]
            cells.append(f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]")
        rows.append(cells)
    return headers, rows


def fusion_from(result: dict, fingerprints: Sequence[str], dataset: str = "semeval2016") -> Fusion:
    """The fusion :func:`compare_fusions` chose, as search reads it: of one model's cosine
    (saved in its directory), or of several (``models`` = their ``fingerprints``)."""
    best, params, record = result["chosen"], result["params"], result["record"]
    splits, folds = "+".join(record["splits"]), record["folds"]
    measure = record.get("measure", "MAP")
    cv_value = result["rows"][best]["all"][measure]
    weighted = best == "weighted-sum"
    record = {**record, "fingerprints": list(fingerprints)}
    if measure == BALANCED:  # splits are already "source/split"
        measure = "mean of MAP (semeval2016) and nDCG@10 (stackexchange)"
        tuned_on = label = splits
    else:
        tuned_on, label = f"{dataset}/{splits}", f"{dataset} {splits}"
    how = f"best of {', '.join(METHODS)} by {folds}-fold cross-validated {measure} ({cv_value:.2f})"
    common = {"tuned_on": tuned_on, "method": best, "cv": record}
    if len(fingerprints) == 1:
        return Fusion(
            bm25=params[0] if weighted else 0.0,
            cosine=params[1] if weighted else 0.0,
            source=f"{label}: {best}, {how}",
            params=None if weighted else params,
            **common,
        )
    return Fusion(
        bm25=params[0] if weighted else 0.0,
        cosine=0.0,
        source=f"{label}: {best} of bm25 and {len(fingerprints)} models, {how}",
        params=params,
        models=list(fingerprints),
        **common,
    )
