"""The built wheel, installed outside the checkout, runs the commands and finds its data files.

An editable install reads everything from the checkout, so it cannot show that a file is
missing from the package. This test builds the wheel, installs it without dependencies into
a fresh virtual environment in a temporary directory (the dependencies come from the test's
own environment through a path file, which keeps it fast and offline) and runs qres from
there, in a working directory that is not the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD_LEFTOVERS = (".git", ".venv", "build", "dist", "runs", "*.egg-info", "__pycache__", ".*cache")


def _run(args, cwd, env=None, check=True):
    out = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    if check:
        assert out.returncode == 0, f"{args}\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # Built from a copy: an in-tree build/ left by an earlier build could add stale files.
    source = tmp_path_factory.mktemp("source") / "qres"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*BUILD_LEFTOVERS))
    out = tmp_path_factory.mktemp("dist")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-q",
            "-w",
            out,
            source,
        ],
        cwd=out,
    )
    (found,) = out.glob("qres-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding the wheel; the test environment's site-packages lends the deps."""
    root = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", root], cwd=root)
    python = root / "bin" / "python"
    site = Path(
        _run([python, "-c", "import site; print(site.getsitepackages()[0])"], root).stdout.strip()
    )
    # Appended after the venv's own site-packages, and its .pth files (the editable install's
    # finder) are not processed: qres itself can only come from the wheel.
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            wheel,
        ],
        cwd=root,
    )
    return root


def test_wheel_installs_only_the_qres_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"qres", wheel.name.split("-py")[0] + ".dist-info"}
    for shipped in (
        "qres/es_config/questions-template.json",
        "qres/es_config/search-log-template.json",
        "qres/es_config/vector-field.json",
        "qres/es_config/kibana/qres.ndjson",
        "qres/training/train.py",
        "qres/models/default/model.onnx",
        "qres/backends/embedded/int8_dot.onnx",  # the dense first stage's int8 scan
        "qres/backends/embedded/half_to_float.onnx",  # stored float16 vectors read as float32
        "qres/data/demo/questions.tsv",
        "qres/static/widget.js",  # qres serve's widget and demo page
        "qres/static/index.html",
    ):
        assert shipped in names


def test_installed_wheel_indexes_searches_and_loads_the_es_template(venv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QRES_BACKEND")}
    env |= {"QRES_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    python, qres = venv / "bin" / "python", venv / "bin" / "qres"
    where = _run([python, "-c", "import qres; print(qres.__file__)"], tmp_path, env).stdout
    assert Path(where.strip()).is_relative_to(venv), where

    commands = _run([qres, "--help"], tmp_path, env).stdout
    for name in ("index", "search", "evaluate", "download", "train", "export-onnx", "kibana-setup"):
        assert f" {name} " in commands, commands

    package = Path(where.strip()).parent
    corpus, model = package / "data" / "demo" / "questions.tsv", package / "models" / "default"
    _run([qres, "index", corpus, "--model", model], tmp_path, env)
    found = json.loads(
        _run([qres, "search", "wifi keeps dropping", "--json"], tmp_path, env).stdout
    )
    assert found["mode"] == "hybrid" and len(found["results"]) == 10

    template = (
        "from qres.backends.elasticsearch import IndexSettings\n"
        "from qres.backends.elasticsearch.kibana import SAVED_OBJECTS\n"
        "settings, mappings = IndexSettings().index_body()\n"
        "print(sorted(mappings['properties']), len(SAVED_OBJECTS.read_bytes()) > 0)\n"
    )
    loaded = _run([python, "-c", template], tmp_path, env).stdout
    assert "'title'" in loaded and loaded.strip().endswith("True"), loaded
