"""`qres tune-fusion --dataset stackexchange`: the fusion cross-validated on a forum's train
split, its candidates those the production pipeline rescores, then applied to the test split."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qres.cli import cli
from qres.encoders.manifest import open_model
from qres.encoders.runtime import Encoder
from qres.evaluation import forum_fusion
from qres.evaluation.fusion_fit import CandidateList, query_metrics
from qres.evaluation.rankers import open_eval_index
from qres.evaluation.runner import eval_index_name, load_benchmark
from qres.ranking.fusion import Fusion
from tests.test_forum_evaluation import LINKS, write_forum

GRU = Path(__file__).resolve().parents[1] / "qres" / "models" / "default"


def test_an_original_the_candidates_missed_counts_against_ndcg():
    both = CandidateList("q", "train", np.array([[1.0, 0.9], [0.5, 0.1]]), np.array([1, 0], bool))
    assert query_metrics("rrf", None, both)["AP"] == 1.0  # SemEval: the list is all there is
    assert "nDCG@10" not in query_metrics("rrf", None, both)
    found = query_metrics("rrf", None, CandidateList(**{**both.__dict__, "relevant": 1}))
    missed = query_metrics("rrf", None, CandidateList(**{**both.__dict__, "relevant": 2}))
    assert found["nDCG@10"] == 1.0 and found["R@10"] == 1.0
    assert missed["nDCG@10"] < 1.0 and missed["R@10"] == 0.5


def test_candidate_lists_hold_every_rescored_candidate_but_the_query(tmp_path, monkeypatch):
    from qres.encoders import model_set

    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    # here the GRU stands for any model whose nearest questions join BM25's (search leaves
    # the shipped GRU's out: model_set.first_stage_of)
    monkeypatch.setattr(model_set, "shipped_gru_fingerprint", lambda: "another model")
    folder = write_forum(tmp_path / "forum", LINKS)
    benchmark = load_benchmark("stackexchange", "train", folder)
    encoder = Encoder.load(GRU)
    with open_eval_index(None, eval_index_name(benchmark, "gru")) as backend:
        lists = forum_fusion.candidate_lists(benchmark, backend, [encoder], dense_candidates=100)
    assert [c.query_id for c in lists] == ["15", "11", "12", "13"]  # train only
    for c, q in zip(lists, benchmark.queries, strict=True):
        # 10 questions: BM25's and the nearest together are the whole forum, but the query
        assert len(c.labels) == 9 and c.labels.sum() == len(q.relevant) == c.relevant
        assert c.x.shape == (9, 2) and np.all(c.x[:, 0] <= 1.0) and np.all(np.abs(c.x[:, 1]) <= 1)


def test_tune_fusion_on_a_forum_then_evaluate_its_test_split(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(tmp_path / "forum", LINKS)
    out, report = tmp_path / "fusion.json", tmp_path / "report.json"
    shipped = (GRU / "fusion.json").read_bytes()
    base = ["--dataset", "stackexchange", "--data-dir", str(folder), "--model", str(GRU)]
    result = CliRunner().invoke(
        cli,
        ["--json", "tune-fusion", *base, "--cv", "2", "--out", str(out), "--report", str(report)],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["record"]["queries"] == 4 and summary["record"]["measure"] == "nDCG@10"
    assert set(summary["methods"]) == {"bm25", "default", "weighted-sum", "rrf", "pairwise-linear"}
    ndcg = summary["methods"][summary["chosen"]]["train"]["nDCG@10"]
    assert ndcg == max(summary["methods"][m]["train"]["nDCG@10"] for m in forum_fusion_methods())
    fusion = json.loads(out.read_text())
    assert fusion["tuned_on"] == "stackexchange/train"
    assert set(fusion["cv"]["fold_of"]) == {"15", "11", "12", "13"}  # the test query 14 unseen
    assert (GRU / "fusion.json").read_bytes() == shipped  # --out: the model's own is left alone
    assert set(json.loads(report.read_text())["per_query"]["bm25"]) == {"15", "11", "12", "13"}
    evaluated = CliRunner().invoke(
        cli,
        ["--json", "evaluate", *base, "--split", "test", "--ranker", "hybrid"]
        + ["--fusion", str(out)],
    )
    assert evaluated.exit_code == 0, evaluated.output
    (evaluation,) = json.loads(evaluated.stdout)
    assert evaluation["split"] == "test" and evaluation["metrics"]["queries"] == 1


def test_held_out_fits_on_the_newest_train_queries_only(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(tmp_path / "forum", LINKS)
    base = ["--dataset", "stackexchange", "--data-dir", str(folder), "--model", str(GRU)]
    out = tmp_path / "fusion.json"
    # the train split's newest tenth of 4 queries is one (13): too few for 2 folds
    result = CliRunner().invoke(cli, ["tune-fusion", *base, "--held-out", "--out", str(out)])
    assert result.exit_code != 0 and "1 queries cannot be cross-validated in 5 folds" in (
        result.output
    )
    assert "Traceback" not in result.output and not out.exists()


def test_tune_fusion_on_a_forum_prints_its_table(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(tmp_path / "forum", LINKS)
    args = ["tune-fusion", "--dataset", "stackexchange", "--data-dir", str(folder)]
    args += ["--model", str(GRU), "--cv", "2", "--out", str(tmp_path / "f.json")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "2-fold CV over 4 of the forum's train-split queries" in result.output
    assert "(kept)" in result.output and "the test split was not read" in result.output


def test_tune_fusion_on_semeval_and_a_forum_together(tmp_path, monkeypatch):
    """--forum adds the forum's train queries to SemEval's in one cross-validated fit; search
    then scores SemEval dev with the folds that did not see a query, the forum's test with
    the refit."""
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(tmp_path / "forum", LINKS)
    model, out = tmp_path / "gru", tmp_path / "both.json"
    shutil.copytree(GRU, model)
    args = ["--json", "tune-fusion", "--model", str(model), "--cv", "2", "--cv-splits", "dev"]
    result = CliRunner().invoke(cli, [*args, "--forum", str(folder), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    bm25 = summary["methods"]["bm25"]
    assert bm25["semeval2016/dev"]["MAP"] == pytest.approx(72.26, abs=0.01)
    assert "nDCG@10" in bm25["stackexchange/train"] and "balanced" in bm25["all"]
    fusion = json.loads(out.read_text())
    assert fusion["tuned_on"] == "semeval2016/dev+stackexchange/train"
    assert len(fusion["cv"]["fold_of"]) == 50 + 4 and "14" not in fusion["cv"]["fold_of"]
    table = CliRunner().invoke(cli, args[1:] + ["--forum", str(folder)])
    assert table.exit_code == 0, table.output
    assert "50 SemEval queries (dev) and 4 of the forum's train split" in table.output
    assert "nDCG@10" in table.output and "(kept)" in table.output
    assert json.loads((model / "fusion.json").read_text()) == fusion  # no --out: the model's
    evaluated = CliRunner().invoke(
        cli,
        ["--json", "evaluate", "--dataset", "stackexchange", "--data-dir", str(folder)]
        + ["--split", "test", "--model", str(model), "--ranker", "hybrid"],
    )
    assert evaluated.exit_code == 0, evaluated.output
    assert "cross-validated" not in evaluated.output  # the test split was no fold's


def test_forum_needs_a_cross_validated_semeval_fit(tmp_path):
    result = CliRunner().invoke(cli, ["tune-fusion", "--model", str(GRU), "--forum", str(tmp_path)])
    assert result.exit_code == 2 and "--forum adds a forum's queries" in result.output
    assert "Traceback" not in result.output
    empty = CliRunner().invoke(
        cli, ["tune-fusion", "--model", str(GRU), "--cv", "2", "--forum", str(tmp_path)]
    )
    assert empty.exit_code == 1 and "Traceback" not in empty.output
    assert f"{tmp_path / 'Posts.xml'}: not found: give the folder that holds the dump" in (
        empty.output
    )


def forum_fusion_methods():
    from qres.ranking.fusion import METHODS

    return METHODS


def test_tune_fusion_on_a_forum_names_a_missing_dump(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(
        cli,
        ["tune-fusion", "--dataset", "stackexchange", "--data-dir", str(tmp_path / "nowhere")]
        + ["--model", str(GRU)],
    )
    assert result.exit_code != 0 and "Posts.xml: not found" in result.output
    assert "Traceback" not in result.output


def test_a_split_other_than_train_is_refused_for_a_forum_before_anything_is_read(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    args = ["tune-fusion", "--dataset", "stackexchange", "--data-dir", str(tmp_path / "nowhere")]
    args += ["--model", str(GRU)]
    refused = CliRunner().invoke(cli, [*args, "--split", "dev"])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert "Invalid value for --split: the forum fusion is always fitted on the forum's train " in (
        refused.output
    )
    assert "its test split is never read" in refused.output
    assert "Posts.xml" not in refused.output  # refused before the forum is looked for
    for split in ([], ["--split", "train"]):  # the default, or the split it fits on: read on
        result = CliRunner().invoke(cli, [*args, *split])
        assert result.exit_code == 1 and "Posts.xml: not found" in result.output


@pytest.mark.parametrize(
    "given, refused",
    [
        (["--method", "rrf"], "--method: only with --cv K"),
        (["--report", "r.json"], "--report: only with --cv K"),
        (["--cv-splits", "dev"], "--cv-splits: only with --cv K"),
        (["--held-out", "--cv", "2"], "--held-out: only with --dataset stackexchange"),
        (["--dataset", "stackexchange", "--cv-splits", "dev"], "--cv-splits: picks SemEval"),
    ],
)
def test_options_that_would_do_nothing_are_refused_not_ignored(
    tmp_path, monkeypatch, given, refused
):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    args = ["tune-fusion", "--model", str(GRU), "--data-dir", str(tmp_path / "nowhere")]
    result = CliRunner().invoke(cli, [*args, *given])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert refused in " ".join(result.output.split())
    assert not (tmp_path / "home").exists() and not (tmp_path / "r.json").exists()


def test_out_onto_the_models_own_fusion_json_keeps_its_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    model = tmp_path / "gru"
    shutil.copytree(GRU, model)
    folder = write_forum(tmp_path / "forum", LINKS)
    args = ["tune-fusion", "--dataset", "stackexchange", "--data-dir", str(folder)]
    args += ["--model", str(model), "--cv", "2", "--out", str(model / "fusion.json")]
    result = CliRunner().invoke(cli, ["--json", *args])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["saved"] == str(model / "fusion.json")
    assert open_model(model).files["fusion.json"] == "fusion"  # listed with its new sha256
    assert Encoder.load(model).fingerprint == Encoder.load(GRU).fingerprint
    assert Fusion.load(model).tuned_on == "stackexchange/train"
