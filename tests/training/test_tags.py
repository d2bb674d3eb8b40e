"""Joint tag prediction (``qres train --tags``) and ``qres tags``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from qres.corpus.readers import Question
from qres.encoders.tag_head import TagPredictor
from qres.evaluation.tag_metrics import tag_metrics
from qres.training.tags import TagHead, tfidf_baseline
from qres.training.train import TrainError, train
from tests.training.helpers import tiny_config, write_semeval_fixture

TINY = [
    "--encoder", "gru", "--hidden", "12", "--vectors", "random",
    "--finetune-embeddings", "--batch-size", "8", "--negatives", "8", "--dropout", "0",
]  # fmt: skip


def test_tag_metrics_by_hand():
    labels = ["a", "b", "c", "d", "e", "f"]
    scores = np.array([[0.9, 0.8, 0.1, 0.7, 0.0, 0.2], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]])
    gold = [("b", "d"), ("a", "z")]  # "z" is not a label: it still counts as missed
    found = tag_metrics(scores, gold, labels)
    # q1 ranking a b d f c e: hits at 2 and 3 -> P@5 2/5, R@5 1, AP (1/2 + 2/3)/2
    # q2 ranking f e d c b a: a at rank 6 -> P@5 0, R@5 0, AP (1/6)/2
    assert found["P@5"] == pytest.approx(100 * (0.4 + 0) / 2)
    assert found["R@5"] == pytest.approx(100 * (1 + 0) / 2)
    assert found["MAP"] == pytest.approx(100 * ((1 / 2 + 2 / 3) / 2 + (1 / 6) / 2) / 2)
    assert found["questions"] == 2


def test_the_tag_head_ignores_untagged_questions_and_learns():
    torch.manual_seed(0)
    head = TagHead(4, ["x", "y"])
    vectors = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0]])
    questions = [
        Question("1", "", "", ("x",)),
        Question("2", "", "", ("y",)),
        Question("3", "", ""),
    ]
    optimizer = torch.optim.SGD(head.parameters(), lr=1.0)
    losses = []
    for _ in range(20):
        loss = head.loss(vectors, questions)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert head.linear.weight.grad[:, 2].abs().sum() == 0  # question 3 has no tags


def test_the_tfidf_baseline_learns_words_of_each_tag():
    train_qs = [Question(str(i), f"wifi network {i}", "", ("net",)) for i in range(5)]
    train_qs += [Question(str(9 + i), f"sound audio {i}", "", ("audio",)) for i in range(5)]
    held = [Question("a", "no wifi", "", ("net",)), Question("b", "no audio", "", ("audio",))]
    assert tfidf_baseline(train_qs, held)["MAP"] == 100.0


def test_joint_training_lowers_both_losses_and_beats_nothing(tmp_path):
    data_dir = write_semeval_fixture(tmp_path / "semeval")
    config = tiny_config(
        dataset="semeval2016", data_dir=str(data_dir), tags=True, epochs=4, lr=5e-3
    )
    run = train(config, tmp_path / "run", show_progress=False)
    history = run["history"]
    assert history[-1]["tag_loss"] < history[0]["tag_loss"]
    assert history[-1]["loss"] < history[0]["loss"]
    assert run["tag_labels"] and set(run["tag_labels"]) <= {
        "wifi", "sound", "grub", "nvidia", "apt", "ssh", "disk", "python"
    }  # fmt: skip
    # 8 equally frequent topics: a constant ranking would put the right one at 4.5 on average
    assert history[-1]["tag_MAP"] > 100 * np.mean([1 / r for r in range(1, 9)])
    assert run["tag_baseline"]["questions"] == 80  # the dev XML's related questions


def test_tags_need_tagged_training_questions(tmp_path):
    with pytest.raises(TrainError, match="no training question.*tags"):
        train(tiny_config(tags=True), tmp_path / "run", show_progress=False)


def test_train_tags_export_and_suggest_from_the_command_line(tmp_path, run):
    data_dir = write_semeval_fixture(tmp_path / "semeval")
    out, model = tmp_path / "run", tmp_path / "model"
    result = run(
        "train", "--dataset", "semeval2016", "--data-dir", data_dir, *TINY, "--epochs", "2",
        "--tags", "--tag-beta", "2", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "TF-IDF logistic regression" in " ".join(result.output.split())
    assert json.loads((out / "run.json").read_text())["train"]["tag_beta"] == 2.0
    result = run("export-onnx", out, "--out", model)
    assert result.exit_code == 0 and "tag head (8 tags)" in result.output, result.output
    files = json.loads((model / "model.json").read_text())["files"]
    assert {name: e["role"] for name, e in files.items()} == {
        "model.onnx": "graph",
        "vocab.txt": "vocabulary",
        "tags.npz": "tag_head",
    }
    result = run("tags", "wifi keeps dropping", "--model", model, "-k", "3", "--json")
    assert result.exit_code == 0, result.output
    suggested = json.loads(result.output)
    assert len(suggested) == 3
    # the same scores as the torch head on the torch encoder
    from qres.training.rundir import load_trained

    encoder, vocab, _ = load_trained(out)
    state = torch.load(out / "best.pt", weights_only=False)["extras"]["tags"]
    labels = json.loads((out / "run.json").read_text())["tag_labels"]
    head = TagHead(encoder.config.output_dim, labels)
    head.load_state_dict(state)
    from qres.training.data import encode_id_lists

    with torch.no_grad():
        ids = vocab.encode_question("wifi keeps dropping", "")
        vector = encoder(*encode_id_lists([ids], "cpu"))
        probs = torch.sigmoid(head(vector))[0].numpy()
    for item in suggested:
        assert item["score"] == pytest.approx(probs[head.labels.index(item["tag"])], abs=1e-4)
    predictor = TagPredictor.load(model)
    top = predictor.suggest(Question("q", "wifi keeps dropping", ""), 3)[0]
    assert top[0] == suggested[0]["tag"]


def test_tags_without_a_tag_head_is_a_clear_error(tmp_path, run):
    shipped = Path(__file__).resolve().parents[2] / "qres" / "models" / "default"
    result = run("tags", "anything", "--model", shipped)
    assert result.exit_code == 1
    assert "no tag head" in result.output


def test_a_tampered_tag_head_is_refused(tmp_path, run):
    data_dir = write_semeval_fixture(tmp_path / "semeval")
    out, model = tmp_path / "run", tmp_path / "model"
    # one epoch: the test needs a tag head to tamper with, not a good one (20 took minutes)
    train_args = ("--dataset", "semeval2016", "--data-dir", data_dir, *TINY, "--epochs", "1")
    assert run("train", *train_args, "--tags", "--out", out).exit_code == 0
    assert run("export-onnx", out, "--out", model).exit_code == 0
    with open(model / "tags.npz", "ab") as f:
        f.write(b"\0")
    result = run("tags", "wifi keeps dropping", "--model", model)
    assert result.exit_code == 1 and "tags.npz: does not match its sha256" in result.output
