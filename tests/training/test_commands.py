"""``train`` and ``export-onnx`` click commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from qres.encoders.runtime import Encoder
from qres.training.commands.train import TORCH_MISSING, export_onnx, train
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
    code = "import sys, qres.training.commands.train; print('torch' in sys.modules)"
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


def test_missing_torch_is_explained(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    result = CliRunner().invoke(train, [*TINY, "--out", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert TORCH_MISSING in result.output


def test_help_teaches_with_an_example():
    result = CliRunner().invoke(train, ["--help"])
    assert "qres train --dataset semeval2016 --encoder rcnn" in result.output
    assert "qres export-onnx" in CliRunner().invoke(export_onnx, ["--help"]).output
