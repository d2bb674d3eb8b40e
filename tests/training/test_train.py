"""Training: the loss falls, separable data gets ranked right, seeds and resume reproduce."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from qres.corpus.readers import Question
from qres.datasets.benchmarks import RankingQuery, TrainQuery
from qres.encoders.runtime import Encoder
from qres.training.config import TrainConfig, TrainError
from qres.training.data import (
    TokenizedQuestions,
    TrainingData,
    epoch_examples,
    load_dataset,
)
from qres.training.encoders import ENCODERS, EncoderConfig, QuestionEncoder
from qres.training.evaluate import evaluate
from qres.training.export import export_onnx
from qres.training.losses import max_margin_loss
from qres.training.train import train, train_step
from qres.training.vectors import build_vocab
from tests.training.helpers import FIXTURE, SHARED_DATA, tiny_config


def test_max_margin_loss_counts_only_the_worst_negative():
    q = torch.tensor([[1.0, 0.0]])
    pos = [0.8, 0.6]
    candidates = torch.tensor([[pos, [0.7, 0.714], [0.0, 1.0]]])  # s+ = 0.8, worst neg 0.7
    loss = max_margin_loss(q, candidates, margin=0.2)
    assert loss.item() == pytest.approx(0.7 - 0.8 + 0.2)
    assert max_margin_loss(q, candidates, margin=0.05).item() == 0.0


@pytest.mark.parametrize("kind", ENCODERS)
def test_each_encoder_lowers_the_loss_on_the_fixture(kind):
    data = load_dataset("askubuntu", FIXTURE)
    config = tiny_config(encoder=kind)
    sentences = [s.split() for q in data.questions.values() for s in (q.title, q.body)]
    vocab, table = build_vocab(sentences, None, random_dim=16, seed=0)
    torch.manual_seed(0)
    model = QuestionEncoder(
        EncoderConfig(kind, len(vocab), 16, hidden=12, dropout=0.0, finetune_embeddings=True),
        table,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batch = epoch_examples(data, np.random.default_rng(0), n_negatives=8)[:12]
    tokenized = TokenizedQuestions(data.questions, vocab, 40, 100)
    losses = [
        train_step(model, optimizer, batch, tokenized, "cpu", config)["loss"] for _ in range(15)
    ]
    assert losses[-1] < 0.75 * losses[0], losses


def toy_data() -> TrainingData:
    """Similar questions share no word: "a1" questions match "a2" ones, "b1" match "b2".

    Only training can tell that apple/banana/cherry goes with grape/melon/peach rather than
    with clutch/gear/piston, so an untrained encoder ranks the dev candidates at random.
    """
    words = {
        "a1": "apple banana cherry",
        "a2": "grape melon peach",
        "b1": "engine wheel brake",
        "b2": "clutch gear piston",
    }
    rng = np.random.default_rng(0)
    questions = {
        f"{group}_{i}": Question(
            f"{group}_{i}",
            " ".join(rng.choice(pool.split(), 3)),
            " ".join(rng.choice(pool.split(), 5)),
        )
        for group, pool in words.items()
        for i in range(12)
    }
    train_queries = []
    for i in range(8):
        for left, right, other in (
            ("a1", "a2", "b2"),
            ("b1", "b2", "a2"),
            ("a2", "a1", "b1"),
            ("b2", "b1", "a1"),
        ):
            train_queries.append(
                TrainQuery(f"{left}_{i}", [f"{right}_{i}"], [f"{other}_{j}" for j in range(8)])
            )
    dev = [
        RankingQuery(
            f"{left}_{i}",
            [f"{g}_{j}" for j in range(8, 12) for g in ("a2", "b2")],
            frozenset(f"{right}_{j}" for j in range(8, 12)),
        )
        for left, right in (("a1", "a2"), ("b1", "b2"))
        for i in range(8, 12)
    ]
    return TrainingData(
        "toy",
        questions,
        train_queries,
        dev,
        pool=list(questions),
        hard_in_file=False,
        skip_dev_without_relevant=True,
        vocab_ids=list(questions),
    )


def test_a_separable_toy_set_is_ranked_perfectly_after_training(tmp_path):
    data = toy_data()
    config = tiny_config(encoder="cnn", epochs=3, patience=20, negatives=4, batch_size=4, lr=1e-2)
    untrained = train(
        replace(config, epochs=1, lr=0.0), tmp_path / "untrained", data=data, show_progress=False
    )
    assert untrained["dev_metrics"]["MAP"] < 90
    run = train(config, tmp_path / "run", data=data, show_progress=False)
    assert run["history"][-1]["loss"] < run["history"][0]["loss"]
    assert run["dev_metrics"]["MAP"] == pytest.approx(100.0)


def test_a_fixed_seed_reproduces_the_losses_and_another_seed_does_not(tmp_path):
    config = tiny_config(encoder="rcnn", hidden=8, dropout=0.2, epochs=1)  # 3 runs: one epoch
    first = train(config, tmp_path / "a", show_progress=False)["history"]
    second = train(config, tmp_path / "b", show_progress=False)["history"]
    assert [r["loss"] for r in first] == [r["loss"] for r in second]
    assert [r["MAP"] for r in first] == [r["MAP"] for r in second]
    other = tiny_config(encoder="rcnn", hidden=8, dropout=0.2, epochs=1, seed=1)
    third = train(other, tmp_path / "c", show_progress=False)["history"]
    assert [r["loss"] for r in third] != [r["loss"] for r in first]


def test_resuming_continues_exactly_where_the_run_stopped(tmp_path):
    straight = train(tiny_config(epochs=2), tmp_path / "straight", show_progress=False)
    train(tiny_config(epochs=1), tmp_path / "resumed", show_progress=False)
    resumed = train(tiny_config(epochs=2), tmp_path / "resumed", resume=True, show_progress=False)
    assert [r["epoch"] for r in resumed["history"]] == [1, 2]
    for a, b in zip(straight["history"], resumed["history"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
        assert a["MAP"] == pytest.approx(b["MAP"], abs=1e-6)


def test_an_existing_run_is_not_overwritten_without_resume(tmp_path):
    train(tiny_config(epochs=1), tmp_path / "run", show_progress=False)
    with pytest.raises(TrainError, match="already holds a run"):
        train(tiny_config(epochs=1), tmp_path / "run", show_progress=False)
    with pytest.raises(TrainError, match="nothing to resume"):
        train(tiny_config(epochs=1), tmp_path / "empty", resume=True, show_progress=False)


def test_early_stopping_stops_after_patience_epochs_without_improvement(tmp_path):
    run = train(tiny_config(epochs=30, patience=1, lr=0.0), tmp_path / "run", show_progress=False)
    # lr 0: the dev score never improves after epoch 1, so epoch 2 is the last.
    assert [r["epoch"] for r in run["history"]] == [1, 2]
    assert run["best_epoch"] == 1


def test_fixture_runs_through_train_export_and_onnx_evaluation(tmp_path):
    config = TrainConfig(
        dataset="askubuntu",
        data_dir=str(FIXTURE),
        encoder="gru",
        hidden=24,
        vectors="glove50",
        epochs=3,
        batch_size=8,
        seed=0,
    )
    run = train(config, tmp_path / "run", show_progress=False)
    export_onnx(tmp_path / "run", tmp_path / "model")
    encoder = Encoder.load(tmp_path / "model")
    data = load_dataset("askubuntu", FIXTURE)
    metrics = evaluate(
        data.dev, data.questions, encoder.encode_questions, skip_without_relevant=True
    )
    assert metrics["queries"] == 16  # the dev query without a similar question is dropped
    for name in ("MAP", "MRR", "P@1", "P@5"):
        assert metrics[name] == pytest.approx(run["dev_metrics"][name], abs=1e-3)
    # 3 similar among 20 candidates: a random order scores about 25 MAP.
    assert metrics["MAP"] > 40
    card = json.loads((tmp_path / "model" / "model.json").read_text())
    assert card["dev_metrics"] == run["dev_metrics"]
    assert card["training"]["dataset"] == "askubuntu"


def test_hard_negatives_from_a_callable_are_used():
    data = load_dataset("askubuntu", FIXTURE)
    hard = ["653", "646", "639"]
    examples = epoch_examples(data, np.random.default_rng(0), 8, hard_negatives=lambda q: hard)
    assert all(set(hard) - {e.query} <= set(e.negatives) for e in examples if e.query not in hard)
    for e in examples:
        assert (
            len(e.negatives) == 8 and e.positive not in e.negatives and e.query not in e.negatives
        )


def test_semeval2016_training_data_from_shared_data():
    folder = SHARED_DATA / "semeval2016-task3"
    assert folder.is_dir(), f"{folder} is missing"
    data = load_dataset("semeval2016", folder)
    assert len(data.dev) == 50 and data.skip_dev_without_relevant is False
    assert len(data.train) == 267 - 30  # queries without a relevant candidate cannot train
    query = data.train[0]
    examples = [
        e for e in epoch_examples(data, np.random.default_rng(0), 20) if e.query == query.id
    ]
    assert len(examples) == len(query.positives)
    for e in examples:
        assert len(e.negatives) == 20
        assert set(query.negatives) <= set(e.negatives)  # its Irrelevant candidates, all 10 fit
        assert not set(e.negatives) & set(query.positives)


def test_mixed_precision_needs_cuda_and_the_cpu_stays_in_fp32(tmp_path):
    with pytest.raises(TrainError, match="precision bf16 needs a CUDA device"):
        train(tiny_config(precision="bf16", device="cpu"), tmp_path / "a", show_progress=False)
    with pytest.raises(TrainError, match="unknown precision 'fp8'"):
        train(tiny_config(precision="fp8", device="cpu"), tmp_path / "b", show_progress=False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mixed_precision_steps_run_under_autocast_and_still_learn(tmp_path, monkeypatch, dtype):
    """The CUDA path, run on the CPU: autocast to ``dtype`` (fp16 with loss scaling)."""
    from qres.training import train as train_module
    from qres.training.config import MixedPrecision

    class CountingScaler(torch.amp.GradScaler):
        steps = 0

        def step(self, optimizer, *args, **kwargs):
            CountingScaler.steps += 1
            return super().step(optimizer, *args, **kwargs)

    scaler = CountingScaler("cpu", enabled=dtype == torch.float16)
    monkeypatch.setattr(
        train_module, "mixed_precision", lambda p, d: MixedPrecision("cpu", dtype, scaler)
    )
    used = []
    real_autocast = torch.autocast

    def recording_autocast(device_type, dtype=None, **kwargs):
        used.append((device_type, dtype))
        return real_autocast(device_type, dtype, **kwargs)

    monkeypatch.setattr(torch, "autocast", recording_autocast)
    config = tiny_config(
        encoder="cnn", epochs=3, patience=20, negatives=4, batch_size=4, lr=1e-2, precision="bf16"
    )
    run = train(config, tmp_path / "run", data=toy_data(), show_progress=False)
    assert used and set(used) == {("cpu", dtype)}
    assert run["history"][-1]["loss"] < run["history"][0]["loss"]
    assert run["dev_metrics"]["MAP"] == pytest.approx(100.0)
    assert CountingScaler.steps == len(used)  # every step went through the scaler
