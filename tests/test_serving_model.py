"""Serving with the shipped model (qres/models/default): the README's main job, end to end."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qres.encoders.manifest import core_roles, manifest
from qres.encoders.runtime import fingerprint, graph_files

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "qres" / "models" / "default"
DEMO = REPO / "qres" / "data" / "demo"


def usb_group() -> set[str]:
    for line in (DEMO / "duplicates.tsv").read_text().splitlines()[1:]:
        name, ids = line.split("\t")
        if name == "usb-boot-install":
            return set(ids.split())
    raise AssertionError("usb-boot-install group missing")


def test_index_with_model_then_hybrid_search(run):
    summary = json.loads(run("--json", "index", DEMO / "questions.tsv", "--model", MODEL).output)
    assert summary["vectors"] and summary["index_size"] == 330
    payload = json.loads(run("--json", "search", "boot ubuntu from usb", "-k", "5").output)
    assert payload["mode"] == "hybrid"
    top = [r["id"] for r in payload["results"]]
    assert top[:2] and set(top[:2]) <= usb_group()
    assert all(r["cosine"] is not None for r in payload["results"])
    info = json.loads(run("--json", "info").output)
    assert info["model"]["execution_providers"][-1] == "CPUExecutionProvider"
    assert info["index_metadata"]["vector_dim"] == info["model"]["dim"]


def test_explain_shows_the_parts_of_the_score(run):
    run("index", DEMO / "questions.tsv", "--model", MODEL)
    output = run("search", "make a bootable pendrive", "--explain", "--mode", "hybrid").output
    assert "cos gru" in output and "bm25" in output


def test_searching_with_another_model_says_to_reindex(run, tmp_path):
    run("index", DEMO / "questions.tsv", "--model", MODEL)
    other = tmp_path / "other-model"
    shutil.copytree(MODEL, other)
    (other / "fusion.json").unlink()  # fitted for the shipped model, not this one
    with open(other / "vocab.txt", "a") as f:
        f.write("an-extra-token\n")  # a different model: same graph, another vocabulary
    card = json.loads((other / "model.json").read_text())
    card["fingerprint"] = fingerprint(other, graph_files(card))
    card["files"] = manifest(other, core_roles(card))
    (other / "model.json").write_text(json.dumps(card))
    result = run("search", "usb", "--model", other)
    assert result.exit_code == 1
    assert "re-index" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_broken_model_is_one_clear_error(run, tmp_path, damage):
    broken = tmp_path / "model"
    shutil.copytree(MODEL, broken)
    if damage == "missing":
        (broken / "model.onnx").unlink()
    else:
        (broken / "model.onnx").write_bytes(b"not an onnx graph")
    result = run("index", DEMO / "questions.tsv", "--model", broken)
    assert result.exit_code == 1
    assert str(broken) in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_serving_never_imports_torch(tmp_path):
    code = (
        "import sys, os; os.environ['QRES_HOME'] = sys.argv[1];"
        "from qres.cli import main;"
        "sys.argv = ['qres', 'index', sys.argv[2], '--model', sys.argv[3]];"
        "\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'serving imported torch'"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), str(DEMO / "questions.tsv"), str(MODEL)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
