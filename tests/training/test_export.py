"""ONNX export: onnxruntime matches torch for every encoder, batch size and length."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from qres.corpus.readers import Question
from qres.encoders.runtime import Encoder
from qres.training.data import encode_id_lists
from qres.training.encoders import ENCODERS, POOLINGS
from qres.training.export import export_field_encoder, export_onnx, parity_error
from qres.training.rundir import load_trained
from qres.training.train import train
from tests.training.helpers import tiny_config, tiny_model

LENGTHS = (1, 7, 100)


@pytest.mark.parametrize("kind", ENCODERS)
def test_onnx_matches_torch_for_every_batch_size_and_length(tmp_path, kind):
    for pooling in POOLINGS[kind]:
        model = tiny_model(kind, pooling, ngram=3 if kind == "rcnn" else 2)
        path = tmp_path / f"{kind}-{pooling}.onnx"
        export_field_encoder(model.title_encoder, path)
        error = parity_error(model.title_encoder, path, LENGTHS, batches=(1, 3, 16), seed=5)
        assert error < 1e-4, (kind, pooling, error)


@pytest.fixture(scope="module")
def separate_run(tmp_path_factory):
    """A one-epoch RCNN run with separate title and body encoders, exported."""
    root = tmp_path_factory.mktemp("separate")
    config = tiny_config(encoder="rcnn", separate_fields=True, epochs=1, hidden=10)
    train(config, root / "run", show_progress=False)
    card = export_onnx(root / "run", root / "model")
    return root, card


def test_separate_fields_export_two_graphs_named_in_the_card(separate_run):
    root, card = separate_run
    assert card["graphs"] == {"title": "model.onnx", "body": "body.onnx"}
    assert (root / "model" / "body.onnx").is_file()
    on_disk = json.loads((root / "model" / "model.json").read_text())
    assert on_disk["fingerprint"] == card["fingerprint"] and len(card["fingerprint"]) == 64
    assert card["export"]["parity_max_abs_error"] < 1e-4
    for key in (
        "architecture",
        "dim",
        "max_title_tokens",
        "max_body_tokens",
        "tokenizer",
        "training",
        "dev_metrics",
        "train_seconds",
        "encoder",
    ):
        assert key in card, key
    assert card["tokenizer"] == "qres.text.tokenize"


def test_the_runtime_encodes_questions_as_the_torch_model_does(separate_run):
    root, _ = separate_run
    model, vocab, run = load_trained(root / "run")
    encoder = Encoder.load(root / "model")
    questions = [
        Question("1", "wifi not working after upgrade", "the wireless icon is gone . " * 30),
        Question("2", "Install NVIDIA driver?", ""),  # no body: the title alone
        Question("3", "", "only a body here about grub"),
        Question("4", "zzunknownword qqq", "more unknown words xyzzy"),
    ]
    got = encoder.encode_questions(questions, batch_size=3)
    pairs = [
        vocab.encode_question(q.title, q.body, run["title_max"], run["body_max"]) for q in questions
    ]
    with torch.no_grad():
        expected = model(*encode_id_lists(pairs, "cpu")).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert got.shape == (4, encoder.dim) and got.dtype == np.float32
    query = encoder.encode_query("wifi not working after upgrade")
    as_title = encoder.encode_questions([Question("q", "wifi not working after upgrade", "")])
    np.testing.assert_allclose(query, as_title[0])
