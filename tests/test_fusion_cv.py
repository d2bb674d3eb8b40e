"""Fusion learned by cross-validation (qres.evaluation.fusion_fit) and its use in search and
evaluate."""

import json
from dataclasses import asdict, replace

import numpy as np
import pytest

from qres.backends.embedded import EmbeddedBackend
from qres.evaluation import fusion_fit as fcv
from qres.evaluation.rankers import PipelineRanker
from qres.indexing.pipeline import index_questions
from qres.ranking.fusion import Fusion
from qres.ranking.search import SearchPipeline

from .fakes import TableEncoder
from .test_search import CORPUS, ENCODER


def synthetic(n_queries=40, informative=2, seed=0, noise=0.1):
    """Queries of 10 candidates, 3 relevant; signal ``informative`` ranks them perfectly
    (up to ``noise`` > 1), the others are noise."""
    rng = np.random.default_rng(seed)
    lists = []
    for i in range(n_queries):
        labels = np.zeros(10, dtype=bool)
        labels[rng.choice(10, 3, replace=False)] = True
        x = rng.random((10, 3))
        x[:, informative] = labels + noise * rng.random(10)
        lists.append(fcv.CandidateList(f"q{i}", "train", x, labels))
    return lists


def test_the_weighted_sum_puts_its_weight_on_the_informative_signal():
    lists = synthetic()
    weights = fcv.fit("weighted-sum", lists)
    assert np.isclose(sum(weights), 1.0) and np.argmax(weights) == 2
    assert fcv.mean_ap("weighted-sum", weights, lists) == pytest.approx(1.0)
    assert fcv.mean_ap("weighted-sum", [1.0, 0.0, 0.0], lists) < 0.8


def test_pairwise_learning_to_rank_learns_a_separable_signal():
    lists = synthetic(informative=1)
    w = fcv.fit("pairwise-linear", lists)
    assert fcv.mean_ap("pairwise-linear", w, lists) == pytest.approx(1.0)


def forum_lists(n_queries=20, informative=1, seed=1, noise=0.1):
    """Synthetic queries of the other source, a forum, their ids apart from SemEval's."""
    return [
        replace(c, query_id=f"f{c.query_id}", source="stackexchange")
        for c in synthetic(n_queries, informative, seed, noise)
    ]


@pytest.mark.parametrize("method", ["weighted-sum", "pairwise-linear"])
def test_each_source_weighs_half_of_a_fit_however_many_queries_it_has(method, monkeypatch):
    # (the L2 penalty shrinks with the number of pairs, by design: left out here)
    monkeypatch.setattr(fcv, "L2", 0.0)
    # each source's signal ranks it well but not perfectly, so the two pull apart
    semeval = synthetic(n_queries=10, informative=2, noise=1.5)
    forum = forum_lists(informative=1, noise=1.5)
    once = fcv.fit(method, semeval + forum)
    assert np.allclose(fcv.fit(method, semeval + forum * 5), once, atol=1e-4)
    # one source: five copies of the forum's queries outweigh SemEval's, as they always did
    alike = [replace(c, source="semeval2016") for c in forum]
    assert not np.allclose(fcv.fit(method, semeval + alike * 5), once, atol=1e-2)


def test_a_fit_over_two_sources_is_judged_by_the_mean_of_their_measures():
    forum = [replace(c, relevant=int(c.labels.sum()) + 1) for c in forum_lists()]
    result = fcv.compare_fusions(synthetic(n_queries=10) + forum, ["bm25", "a", "b"], 2)
    assert result["record"]["splits"] == ["semeval2016/train", "stackexchange/train"]
    assert result["record"]["measure"] == fcv.BALANCED
    for row in result["rows"].values():
        both = (row["semeval2016/train"]["MAP"] + row["stackexchange/train"]["nDCG@10"]) / 2
        assert row["all"][fcv.BALANCED] == pytest.approx(both)
        assert "nDCG@10 vs bm25" in row["stackexchange/train"]
    fusion = fcv.fusion_from(result, ["fp-a", "fp-b"])
    assert fusion.tuned_on == "semeval2016/train+stackexchange/train"
    assert "mean of MAP (semeval2016) and nDCG@10 (stackexchange)" in fusion.source


def test_which_splits_a_fusion_was_fitted_on():
    from qres.evaluation.runner import _tuned_on_split

    both = Fusion(0.5, 0.5, tuned_on="semeval2016/dev+stackexchange/train")
    assert _tuned_on_split(both, "semeval2016", "dev")
    assert _tuned_on_split(both, "stackexchange", "train")
    assert not _tuned_on_split(both, "stackexchange", "test")
    assert not _tuned_on_split(both, "semeval2016", "train")
    one = Fusion(0.5, 0.5, tuned_on="semeval2016/train+dev")
    assert _tuned_on_split(one, "semeval2016", "dev") and _tuned_on_split(one, "semeval2016", "all")
    assert not _tuned_on_split(one, "stackexchange", "train")


def test_rrf_is_the_sum_of_reciprocal_ranks():
    x = np.array([[3.0, 0.1], [2.0, 0.9], [1.0, 0.5]])
    expected = [1 / 61 + 1 / 63, 1 / 62 + 1 / 61, 1 / 63 + 1 / 62]
    assert fcv.score("rrf", None, x) == pytest.approx(expected)


@pytest.mark.parametrize("method", ["rrf", "pairwise-linear"])
def test_equal_scores_share_a_rank_whatever_order_the_candidates_came_in(method):
    """Two candidates with the same BM25 score (an index laid out otherwise, or another
    backend, returns them in the other order) get the same fused scores either way."""
    x = np.array([[1.0, 0.2], [0.5, 0.9], [0.5, 0.4], [0.0, 0.8], [0.0, 0.3]])
    params = None if method == "rrf" else [1.0, 1.0, 0.5, 0.5]
    swapped = x[[0, 2, 1, 4, 3]]
    assert fcv.score(method, params, swapped) == pytest.approx(
        fcv.score(method, params, x)[[0, 2, 1, 4, 3]]
    )
    assert fcv.score("rrf", None, x)[1] == pytest.approx(1 / 62 + 1 / 61)  # 0.5 ties at 2nd


def test_folds_are_by_query_balanced_and_reproducible():
    ids = [f"q{i}" for i in range(23)]
    folds = fcv.assign_folds(ids, 5)
    sizes = np.bincount(list(folds.values()))
    assert sorted(folds) == sorted(ids) and sizes.max() - sizes.min() <= 1
    assert folds == fcv.assign_folds(list(reversed(ids)), 5)


def test_every_query_is_scored_by_a_fit_that_never_saw_it(monkeypatch):
    lists = synthetic(n_queries=20)
    seen_by_fit = []
    real_fit = fcv.fit

    def recording_fit(method, train):
        seen_by_fit.append({c.query_id for c in train})
        return real_fit(method, train)

    monkeypatch.setattr(fcv, "fit", recording_fit)
    cv = fcv.cross_validate(lists, k=4, methods=["weighted-sum"])
    assert len(seen_by_fit) == 4
    for query, fold in cv["fold_of"].items():
        assert query not in seen_by_fit[fold]
        assert all(query in seen for f, seen in enumerate(seen_by_fit) if f != fold)
    assert set(cv["methods"]["weighted-sum"]["per_query"]) == {c.query_id for c in lists}


def test_paired_bootstrap_interval():
    mean, low, high = fcv.paired_bootstrap([0.5, 0.7, 0.9], [0.5, 0.7, 0.9])
    assert (mean, low, high) == (0.0, 0.0, 0.0)
    rng = np.random.default_rng(1)
    a, b = rng.random(50), rng.random(50)
    mean, low, high = fcv.paired_bootstrap(a, b)
    assert mean == pytest.approx(100 * (a - b).mean()) and low < mean < high


def cv_fusion():
    """A saved CV fusion: query 'qa' was held out in fold 0 (weights 1/0: BM25 alone),
    'qb' in fold 1 (0/1: cosine alone); the refit on everything is 0.5/0.5."""
    cv = {"folds": 2, "fold_of": {"qa": 0, "qb": 1}, "per_fold": [[1.0, 0.0], [0.0, 1.0]]}
    return Fusion(bm25=0.5, cosine=0.5, method="weighted-sum", cv=cv)


def test_a_cross_validated_query_gets_the_fusion_of_the_folds_without_it():
    fusion = cv_fusion()
    assert fusion.for_query("qa").bm25 == 1.0 and fusion.for_query("qa").cosine == 0.0
    assert fusion.for_query("qb").cosine == 1.0
    assert fusion.for_query("unseen") is fusion
    assert Fusion(**json.loads(json.dumps(asdict(fusion)))) == fusion  # as fusion.json keeps it


def test_saved_rrf_and_learning_to_rank_fusions_score_in_search(tmp_path):
    backend = EmbeddedBackend(tmp_path / "ix", create=True)
    index_questions(backend, CORPUS, encoder=ENCODER)
    for fusion in (
        Fusion(0, 0, method="rrf"),
        Fusion(0, 0, method="pairwise-linear", params=[0.0, 1.0, 0.0, 0.0]),
    ):
        results = SearchPipeline(backend, ENCODER, fusion).search("install ubuntu usb", 3)
        assert results[0].id == "pendrive", fusion.method  # the cosine's favourite
    backend.close()


def test_evaluate_scores_each_cross_validated_query_with_its_held_out_fusion(tmp_path):
    """'qa' (BM25 alone in its fold) ranks the word-sharing printer first; 'qb' (cosine
    alone) the pendrive, for the same text: the refit 0.5/0.5 is never used for them."""
    backend = EmbeddedBackend(tmp_path / "ix", create=True)
    encoder = TableEncoder(ENCODER.directions)
    index_questions(backend, CORPUS, encoder=encoder)
    ranker = PipelineRanker(SearchPipeline(backend, encoder, cv_fusion()), "hybrid")
    from qres.corpus.readers import Question

    text = ("install ubuntu printer driver usb", "")
    candidates = ["printer", "pendrive", "wifi"]
    assert ranker.score(Question("qa", *text), candidates)[0][0] == "printer"
    assert ranker.score(Question("qb", *text), candidates)[0][0] == "pendrive"
    backend.close()


def test_semeval_candidate_lists_hold_bm25_and_every_models_cosine(tmp_path):
    """On the real SemEval dev file: one list per query, its ten candidates, BM25 scaled
    to the query's top, one cosine column per model, the official labels."""
    from qres.datasets.benchmarks import dataset_dir, default_data_dir, load_semeval

    models = []
    for i, directions in enumerate(({"visa": 0, "doha": 1}, {"car": 0, "job": 2})):
        backend = EmbeddedBackend(tmp_path / f"ix{i}", create=True)
        models.append((backend, TableEncoder(directions, fingerprint=f"fake-{i}")))
    lists = fcv.semeval_candidate_lists(default_data_dir(), ["dev"], models)
    dev = load_semeval(dataset_dir("semeval2016", default_data_dir()), "dev").queries
    assert [c.query_id for c in lists] == [q.id for q in dev] and len(lists) == 50
    for c, q in zip(lists, dev, strict=True):
        assert c.x.shape == (10, 3) and c.split == "dev"
        assert c.x[:, 0].max() == pytest.approx(1.0) or c.x[:, 0].max() == 0.0
        assert c.labels.sum() == len(q.relevant)
    assert fcv.mean_ap("weighted-sum", [1.0, 0.0, 0.0], lists) == pytest.approx(0.7226, abs=0.02)
    for backend, _ in models:
        backend.close()


def test_evaluate_reports_the_cross_validated_figure_that_tune_fusion_measured(run, tmp_path):
    """`qres tune-fusion --cv` then `qres evaluate`: each dev query's hybrid AP through the
    production search path is its out-of-fold AP from the cross-validation."""
    import shutil
    from pathlib import Path

    model = tmp_path / "gru"
    shutil.copytree(Path(__file__).parents[1] / "qres" / "models" / "default", model)
    tuned = run(
        "--json", "tune-fusion", "--model", model, "--cv", 5, "--cv-splits", "dev",
        "--report", tmp_path / "cv.json",
    )  # fmt: skip
    assert tuned.exit_code == 0, tuned.output
    report = json.loads(tuned.output)
    saved = json.loads((model / "fusion.json").read_text())
    assert saved["method"] == report["chosen"] and saved["tuned_on"] == "semeval2016/dev"
    assert len(saved["cv"]["fold_of"]) == 50 and len(saved["cv"]["per_fold"]) == 5
    assert report["methods"]["bm25"]["dev"]["MAP"] == pytest.approx(72.26, abs=0.01)

    evaluated = run(
        "--json", "evaluate", "--dataset", "semeval2016", "--split", "dev",
        "--model", model, "--ranker", "hybrid", "--per-query",
    )  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    hybrid = json.loads(evaluated.output[evaluated.output.index("[") :])[0]
    cv_map = report["methods"][report["chosen"]]["dev"]["MAP"]
    assert hybrid["metrics"]["MAP"] == pytest.approx(cv_map, abs=0.05)
    out_of_fold = json.loads((tmp_path / "cv.json").read_text())["per_query"][report["chosen"]]
    for row in hybrid["per_query"]:
        assert row["AP"] == pytest.approx(100 * out_of_fold[row["query"]]["AP"], abs=1e-6)


def test_evaluate_with_two_models_reports_the_cross_validated_figure(run, tmp_path):
    """The same with two models: `qres tune-fusion --cv --model A --model B --out FILE`,
    then `qres evaluate --model B --model A --fusion FILE` over one index of both models'
    vectors scores each dev query with the fit of the folds that did not see it."""
    from pathlib import Path

    from qres.encoders.vocab import Vocab
    from tests.safety_helpers import write_model

    vocab = Vocab.load(Path(__file__).parents[1] / "qres" / "models" / "default" / "vocab.txt")
    a = write_model(tmp_path / "a", dim=16, seed=0, vocab=vocab)
    b = write_model(tmp_path / "b", dim=8, seed=1, vocab=vocab)
    fusion = tmp_path / "both.json"
    tuned = run(
        "--json", "tune-fusion", "--model", a, "--model", b, "--cv", 5, "--cv-splits", "dev",
        "--report", tmp_path / "cv.json", "--out", fusion,
    )  # fmt: skip
    assert tuned.exit_code == 0, tuned.output
    report = json.loads(tuned.output)
    saved = Fusion.read(fusion)
    assert len(saved.models) == 2 and len(saved.cv["fold_of"]) == 50
    evaluated = run(
        "--json", "evaluate", "--dataset", "semeval2016", "--split", "dev",
        "--model", b, "--model", a, "--fusion", fusion, "--per-query",
    )  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    assert f"{saved.method} fusion cross-validated in 5 folds" in evaluated.output
    assert "optimistic" not in evaluated.output
    results = json.loads(evaluated.output[evaluated.output.index("[") :])
    assert [e["ranker"] for e in results] == ["given-order", "bm25", "dense", "hybrid"]
    bm25, hybrid = results[1], results[3]
    assert bm25["metrics"]["MAP"] == pytest.approx(72.26, abs=0.01)
    cv_map = report["methods"][report["chosen"]]["dev"]["MAP"]
    assert hybrid["metrics"]["MAP"] == pytest.approx(cv_map, abs=1e-6)
    out_of_fold = json.loads((tmp_path / "cv.json").read_text())["per_query"][report["chosen"]]
    for row in hybrid["per_query"]:
        assert row["AP"] == pytest.approx(100 * out_of_fold[row["query"]]["AP"], abs=1e-6)
    # the folds' fits differ from the refit on all queries, so held-out scoring is exercised
    assert any(params != saved.params for params in saved.cv["per_fold"])

    c = write_model(tmp_path / "c", dim=8, seed=2, vocab=vocab)
    missing = run(
        "evaluate", "--dataset", "semeval2016", "--model", a, "--model", c,
        "--fusion", fusion, "--ranker", "hybrid",
    )  # fmt: skip
    assert missing.exit_code == 1
    fp = saved.models[1][:12]
    assert missing.output.strip().splitlines() == [
        f"error: {fusion} fuses model {fp}, which is not given: pass --model DIR of every "
        "model it fuses"
    ]


def test_only_a_benchmarks_own_queries_get_the_folds_that_did_not_see_them():
    """A fit over SemEval dev and a forum keeps each query's fold; evaluated elsewhere (another
    forum whose ids repeat the first's, or AskUbuntu), every query gets the refit."""
    from qres.datasets.benchmarks import RankingQuery
    from qres.evaluation.benchmark import Benchmark
    from qres.evaluation.runner import _folds_for

    cv = {
        "folds": 2,
        "fold_of": {"Q1": 0, "Q2": 1, "11": 0, "12": 1},
        "per_fold": [[0.1, 0.9], [0.2, 0.8]],
        "originals": {"11": ["5"], "12": ["6", "7"]},
    }
    fusion = Fusion(0.3, 0.7, tuned_on="semeval2016/dev+stackexchange/train", cv=cv)

    def bench(dataset, split, links):
        queries = [RankingQuery(q, [], frozenset(r)) for q, r in links.items()]
        forum = dataset == "stackexchange"
        return Benchmark(dataset, split, queries, {}, list, False, whole_forum=forum)

    same_forum = _folds_for(
        fusion, bench("stackexchange", "train", {"11": {"5"}, "12": {"7", "6"}})
    )
    assert same_forum.cv["fold_of"] == {"11": 0, "12": 1}
    assert same_forum.for_query("12").bm25 == 0.2 and same_forum.for_query("11").bm25 == 0.1
    other_forum = _folds_for(fusion, bench("stackexchange", "train", {"11": {"9"}, "12": {"6"}}))
    assert other_forum.cv is None and other_forum.for_query("11") is other_forum
    assert _folds_for(fusion, bench("stackexchange", "test", {"11": {"5"}})).cv is None
    assert _folds_for(fusion, bench("askubuntu", "dev", {"11": {"5"}})).cv is None
    assert _folds_for(fusion, bench("semeval2016", "dev", {"Q1": set()})).cv["fold_of"] == {
        "Q1": 0,
        "Q2": 1,
    }
