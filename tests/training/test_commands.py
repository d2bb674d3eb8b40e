"""``train`` and ``export-onnx`` click commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from qres.encoders.runtime import Encoder
from qres.training.commands import TORCH_MISSING
from qres.training.commands.export import export_onnx
from qres.training.commands.train import train
from tests.training.helpers import FIXTURE

TINY = [
    "--dataset",
    "askubuntu",
    "--data-dir",
    str(FIXTURE),
    "--encoder",
    "cnn",
    "--hidden",
    "8",
    "--vectors",
    "random",
    "--finetune-embeddings",
    "--epochs",
    "1",
]


def test_importing_the_commands_does_not_import_torch():
    code = (
        "import sys, qres.training.commands.train, qres.training.commands.export, "
        "qres.training.commands.import_encoder; print('torch' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_train_then_export_from_the_command_line(tmp_path):
    runner = CliRunner()
    result = runner.invoke(train, [*TINY, "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "best epoch 1" in result.output
    result = runner.invoke(export_onnx, [str(tmp_path / "run"), "--out", str(tmp_path / "model")])
    assert result.exit_code == 0, result.output
    encoder = Encoder.load(tmp_path / "model")
    card = json.loads((tmp_path / "model" / "model.json").read_text())
    assert encoder.dim == 8 and card["architecture"] == "cnn"
    assert card["encoder"]["finetune_embeddings"] is True
    # A file that is not a checkpoint, in the run or alone: one line naming it.
    (tmp_path / "run" / "junk.pt").write_bytes(b"not a checkpoint")
    result = runner.invoke(
        export_onnx, [str(tmp_path / "run" / "junk.pt"), "--out", str(tmp_path / "m2")]
    )
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert "junk.pt: not a qres training checkpoint" in result.output
    (tmp_path / "junk.pt").write_bytes(b"x")
    result = runner.invoke(export_onnx, [str(tmp_path / "junk.pt"), "--out", str(tmp_path / "m3")])
    assert result.exit_code == 1
    assert "junk.pt: a checkpoint is read from its training run directory" in result.output
    assert not (tmp_path / "m2").exists() and not (tmp_path / "m3").exists()


def test_user_errors_are_one_line(tmp_path):
    runner = CliRunner()
    result = runner.invoke(train, [*TINY, "--out", str(tmp_path / "r"), "--resume"])
    assert result.exit_code == 1
    assert result.output.strip().startswith("error:") and "nothing to resume" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(train, [*TINY, "--pooling", "last", "--out", str(tmp_path / "p")])
    assert result.exit_code == 1 and "cnn pools by mean, max, not 'last'" in result.output
    result = runner.invoke(
        train, [*TINY[:2], "--data-dir", str(tmp_path), "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 1
    assert "text_tokenized.txt.gz: not found: run `qres download askubuntu`" in result.output
    result = runner.invoke(export_onnx, [str(tmp_path), "--out", str(tmp_path / "m")])
    assert result.exit_code == 1 and "training run directory" in result.output


@pytest.mark.parametrize(
    "given, refused",
    [
        (["--device", "gpu"], "'gpu' is not auto, cpu, cuda or cuda:N"),
        (["--epochs", "0"], "--epochs"),
        (["--negatives", "0"], "--negatives"),
        (["--batch-size", "0"], "--batch-size"),
        (["--lr", "-1"], "--lr"),
        (["--dropout", "1"], "--dropout"),
    ],
)
def test_values_a_run_cannot_use_are_refused_before_the_run_is_made(tmp_path, given, refused):
    result = CliRunner().invoke(train, [*TINY, *given, "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and refused in result.output
    assert "Traceback" not in result.output and not (tmp_path / "r").exists()


def test_missing_torch_is_explained(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    result = CliRunner().invoke(train, [*TINY, "--out", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert TORCH_MISSING in result.output


def test_help_teaches_with_an_example():
    result = CliRunner().invoke(train, ["--help"])
    assert "qres train --dataset semeval2016 --encoder rcnn" in result.output
    assert "qres export-onnx" in CliRunner().invoke(export_onnx, ["--help"]).output


def test_the_options_become_a_config_without_click(tmp_path):
    from qres.training.config import TrainConfig, TrainError

    options = {"dataset": "askubuntu", "data_dir": tmp_path, "hidden": None, "unlabelled": ()}
    config = TrainConfig.from_options(options)
    assert config.data_dir == str(tmp_path) and config.hidden is None and config.unlabelled == []
    with pytest.raises(TrainError, match="--unlabelled needs --teacher"):
        TrainConfig.from_options({**options, "unlabelled": (tmp_path / "more.tsv",)})
    with_teacher = {**options, "unlabelled": (tmp_path / "more.tsv",), "teacher": "models/t"}
    assert TrainConfig.from_options(with_teacher).unlabelled == [str(tmp_path / "more.tsv")]


def test_the_run_summary_puts_each_extra_beside_its_reference():
    from qres.training.rundir import run_summary

    best = {"MAP": 61.0, "MRR": 70.0, "P@1": 55.0}
    run = {
        "history": [{"epoch": 1}, {"epoch": 2, "tag_P@5": 30.0, "tag_R@5": 40.0, "tag_MAP": 50.0}],
        "best_epoch": 2,
        "dev_metrics": best,
        "training": {"scored_on": "dev"},
        "train_seconds": 12.0,
        "pretrain": {
            "history": [{"heldout_perplexity": 80.5}],
            "dev_before_pretraining": {"MAP": 40.0},
            "dev_after_pretraining": {"MAP": 50.0},
        },
        "tag_baseline": {"questions": 9, "P@5": 20.0, "R@5": 25.0, "MAP": 35.0},
    }
    lines = run_summary(run, Path("runs/x"))
    assert lines[0].startswith("pre-training: held-out perplexity 80.5; dev MAP 40.00")
    assert "-> 50.00 (pre-trained) -> 61.00 (fine-tuned)" in lines[0]
    assert "head P@5 30.00 R@5 40.00 MAP 50.00" in lines[1] and "P@5 20.00" in lines[1]
    assert lines[2].startswith("best epoch 2: dev MAP 61.00, MRR 70.00, P@1 55.00 in 12s")
    assert lines[2].endswith("next: qres export-onnx runs/x --out models/x")
    plain = {**run, "pretrain": None, "tag_baseline": None}
    assert run_summary(plain, Path("runs/x")) == lines[2:]
    assert run_summary({**plain, "dev_metrics": {}}, Path("runs/x")) == []
