"""Distillation (``qres train --teacher``): the similarity loss, the teacher-vector cache, the
command end to end on a SemEval-layout fixture whose dev file is absent, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from qres.corpus.readers import Question
from qres.encoders.runtime import Encoder
from qres.training.commands.export import export_onnx
from qres.training.commands.train import train
from qres.training.config import TrainError
from qres.training.data import hold_out_train, load_dataset
from qres.training.distill import nearest, teacher_vectors
from qres.training.losses import similarity_distillation_loss
from tests.training.helpers import FIXTURE, write_semeval_fixture

TINY = ["--hidden", "8", "--vectors", "random", "--finetune-embeddings", "--dropout", "0"]


def unit(rows: int, dim: int, seed: int = 0) -> torch.Tensor:
    vectors = torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.normalize(vectors, dim=1)


def test_a_student_with_the_teachers_cosines_has_no_loss_and_a_shuffled_one_has_some():
    teacher = unit(12, 6)
    # Another dimension, same cosines: the teacher's vectors rotated into 10 dimensions.
    rotation = torch.linalg.qr(torch.randn(10, 10, generator=torch.Generator().manual_seed(1)))[0]
    same = torch.nn.functional.pad(teacher, (0, 4)) @ rotation
    shuffled = teacher[torch.randperm(12, generator=torch.Generator().manual_seed(2))]
    assert similarity_distillation_loss(teacher, teacher).item() == pytest.approx(0, abs=1e-6)
    assert similarity_distillation_loss(same, teacher).item() == pytest.approx(0, abs=1e-5)
    assert similarity_distillation_loss(shuffled, teacher).item() > 0.5
    assert similarity_distillation_loss(unit(12, 6, seed=3), teacher).item() > 0.5


def test_nearest_finds_each_vectors_closest_others_but_never_itself():
    vectors = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    assert nearest(vectors, 1, block=3)[:, 0].tolist() == [1, 0, 3, 2]
    assert nearest(vectors, 10).shape == (4, 3)


def test_held_out_train_queries_leave_training_and_are_ranked_over_their_candidates():
    data = load_dataset("askubuntu", FIXTURE, with_dev=False)
    assert data.dev == []
    held = hold_out_train(data, 0.2, seed=0)
    train_ids, dev_ids = {q.id for q in held.train}, {q.id for q in held.dev}
    assert not train_ids & dev_ids and train_ids | dev_ids == {q.id for q in data.train}
    assert len(dev_ids) == round(0.2 * len(data.train))
    original = {q.id: q for q in data.train}
    for q in held.dev:
        assert q.relevant == frozenset(original[q.id].positives)
        assert set(q.candidates) == {*original[q.id].positives, *original[q.id].negatives}
    assert hold_out_train(data, 0.2, seed=0).dev == held.dev


class CountingTeacher:
    """Encoder stand-in: a fixed vector per text, and a count of the questions encoded."""

    def __init__(self, fingerprint: str = "f" * 64, dim: int = 3):
        self.fingerprint, self.dim, self.model_dir = fingerprint, dim, Path("teacher")
        self.encoded = 0

    def encode_questions(self, questions):
        self.encoded += len(questions)
        rows = [
            np.random.default_rng(list(q.text.encode())).normal(size=self.dim) for q in questions
        ]
        return np.array(rows, dtype=np.float32)


def test_the_teacher_cache_encodes_each_text_once_per_fingerprint(tmp_path):
    questions = [Question(str(i), f"title {i}", f"body {i}") for i in range(5)]
    teacher = CountingTeacher()
    first, encoded = teacher_vectors(teacher, questions, tmp_path)
    assert encoded == 5 and teacher.encoded == 5
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0)
    again, encoded = teacher_vectors(teacher, questions[::-1], tmp_path)
    assert encoded == 0 and teacher.encoded == 5
    assert np.array_equal(again, first[::-1])
    # A new text (the same text under another id is not new) is encoded and added.
    more = [*questions, Question("x", "title 0", "body 0"), Question("5", "new", "")]
    vectors, encoded = teacher_vectors(teacher, more, tmp_path)
    assert encoded == 1 and teacher.encoded == 6
    assert np.array_equal(vectors[5], first[0])
    assert teacher_vectors(teacher, more, tmp_path)[1] == 0
    # Another teacher (fingerprint) has its own cache.
    other = CountingTeacher("e" * 64)
    assert teacher_vectors(other, questions, tmp_path)[1] == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e" * 64 + ".npz", "f" * 64 + ".npz"]


def test_a_cache_that_does_not_fit_its_teacher_is_a_one_line_error(tmp_path):
    questions = [Question("1", "a title", "")]
    teacher_vectors(CountingTeacher(dim=3), questions, tmp_path)
    with pytest.raises(TrainError, match=r"f{64}\.npz: .*3-d vectors, not the 4-d") as err:
        teacher_vectors(CountingTeacher(dim=4), questions, tmp_path)
    assert "\n" not in str(err.value)
    (tmp_path / ("f" * 64 + ".npz")).write_bytes(b"not a zip")
    with pytest.raises(TrainError, match="unreadable teacher-vector cache"):
        teacher_vectors(CountingTeacher(dim=3), questions, tmp_path)


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory) -> Path:
    """An exported 6-d CNN trained one epoch on the AskUbuntu fixture."""
    folder = tmp_path_factory.mktemp("teacher")
    runner = CliRunner()
    args = ["--dataset", "askubuntu", "--data-dir", str(FIXTURE), "--encoder", "cnn"]
    result = runner.invoke(
        train, [*args, *TINY, "--hidden", "6", "--epochs", "1", "--out", str(folder / "run")]
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(export_onnx, [str(folder / "run"), "--out", str(folder / "model")])
    assert result.exit_code == 0, result.output
    return folder / "model"


@pytest.fixture
def semeval_without_dev(tmp_path) -> Path:
    folder = write_semeval_fixture(tmp_path / "semeval")
    (folder / "SemEval2016-Task3-CQA-QL-dev.xml").unlink()
    return folder


def distil(tmp_path, data_dir, teacher, *extra) -> tuple:
    args = ["--dataset", "semeval2016", "--data-dir", str(data_dir), "--encoder", "gru"]
    out = tmp_path / "student"
    args += [*TINY, "--epochs", "2", "--teacher", str(teacher), "--out", str(out), *extra]
    return CliRunner().invoke(train, args), out


def test_distil_then_export_from_the_command_line_without_the_dev_file(
    tmp_path, monkeypatch, tiny_teacher, semeval_without_dev
):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    corpus = tmp_path / "more.tsv"
    corpus.write_text("id\ttitle\tbody\nu1\thow to cook rice\tin a pot\nu2\tbake bread\t\n")
    result, run_dir = distil(tmp_path, semeval_without_dev, tiny_teacher, "--unlabelled", corpus)
    assert result.exit_code == 0, result.output
    assert "held-out train MAP" in result.output
    run = json.loads((run_dir / "run.json").read_text())
    teacher = Encoder.load(tiny_teacher)
    record = run["training"]["teacher"]
    assert record["fingerprint"] == teacher.fingerprint and record["dim"] == 6
    assert record["encoded"] == record["pool_questions"] > 2
    assert run["training"]["heldout_queries"] >= 1 and run["training"]["dev_queries"] == 0
    assert all(r["distill_loss"] > 0 and r["ranking_loss"] > 0 for r in run["history"])
    assert "rice" in (run_dir / "vocab.txt").read_text().split()
    cache = tmp_path / "home" / "cache" / "teacher" / f"{teacher.fingerprint}.npz"
    assert cache.is_file()

    result = CliRunner().invoke(export_onnx, [str(run_dir), "--out", str(tmp_path / "model")])
    assert result.exit_code == 0, result.output
    student = Encoder.load(tmp_path / "model")
    card = student.card
    assert student.dim == 8 and card["architecture"] == "gru"
    assert card["training"]["teacher"]["fingerprint"] == teacher.fingerprint
    assert student.encode_query("wifi drops").shape == (8,)

    # A second run finds every teacher vector in the cache; distillation alone also works.
    result, run_dir = distil(
        tmp_path / "again", semeval_without_dev, tiny_teacher, "--supervised-weight", "0"
    )
    assert result.exit_code == 0, result.output
    run = json.loads((run_dir / "run.json").read_text())
    assert run["training"]["teacher"]["encoded"] == 0
    assert all("ranking_loss" not in r for r in run["history"])


def one_line_error(result, *names) -> str:
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for name in names:
        assert str(name) in lines[0], lines[0]
    return lines[0]


def test_a_missing_or_broken_teacher_is_a_one_line_error_naming_it(
    tmp_path, monkeypatch, tiny_teacher, semeval_without_dev
):
    import shutil

    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    missing = tmp_path / "no-such-model"
    result, _ = distil(tmp_path / "a", semeval_without_dev, missing)
    assert "not found" in one_line_error(result, missing)

    edited = tmp_path / "edited"
    shutil.copytree(tiny_teacher, edited)
    card = json.loads((edited / "model.json").read_text())
    (edited / "model.json").write_text(json.dumps({**card, "fingerprint": "0" * 64}))
    result, _ = distil(tmp_path / "b", semeval_without_dev, edited)
    assert "fingerprint" in one_line_error(result, edited)

    (edited / "model.json").write_text(json.dumps({**card, "dim": 5}))
    result, _ = distil(tmp_path / "c", semeval_without_dev, edited)
    assert "5-d" in one_line_error(result, edited)


def test_resuming_with_another_teacher_is_refused(
    tmp_path, monkeypatch, tiny_teacher, semeval_without_dev
):
    import shutil

    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    result, run_dir = distil(tmp_path, semeval_without_dev, tiny_teacher)
    assert result.exit_code == 0, result.output
    # Swap the teacher in place for another model: same directory, other fingerprint.
    run = json.loads((run_dir / "run.json").read_text())
    run["train"]["teacher"] = str(tmp_path / "other")
    (run_dir / "run.json").write_text(json.dumps(run))
    other = tmp_path / "other"
    CliRunner().invoke(export_onnx, [str(run_dir), "--out", str(other)])
    shutil.rmtree(tmp_path / "home")
    result = CliRunner().invoke(train, ["--out", str(run_dir), "--resume", "--epochs", "3"])
    assert "was distilled from" in one_line_error(result, other)


def test_unlabelled_without_a_teacher_and_teacher_with_tags_are_refused(tmp_path):
    corpus = tmp_path / "more.tsv"
    corpus.write_text("id\ttitle\tbody\nu1\thow to cook rice\t\n")
    result = CliRunner().invoke(train, ["--unlabelled", str(corpus), "--out", str(tmp_path / "r")])
    one_line_error(result, "--unlabelled needs --teacher")
    result = CliRunner().invoke(
        train, ["--teacher", str(tmp_path), "--tags", "--out", str(tmp_path / "r")]
    )
    one_line_error(result, "--teacher cannot be combined with --tags")
