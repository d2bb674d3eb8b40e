"""kill -9 during `qres index --rebuild`, `qres compact` and the automatic compaction of
`qres index`: the killed job's work directory (INDEX.rebuild, a near-full copy of the index)
is named by `qres info`, removed by the next write with one line saying so, and the index
and its vectors stay exact throughout.

Each job runs the real command in a subprocess and SIGKILLs itself at a seeded point inside
the copy into the work directory (the tiny ONNX model of tests/safety_helpers.py).
"""

from __future__ import annotations

import json
import random

import pytest

from qres.backends.embedded import EmbeddedBackend
from tests.safety_helpers import (
    assert_committed_prefix,
    make_corpus,
    python,
    vector_mismatches,
    write_model,
    write_tsv,
)

pytestmark = pytest.mark.slow

N = 600

# Runs `qres ARGS...`; with KILL_AT > 0, SIGKILLs the process on that call into the work
# directory (a rebuild's batches or a compaction's copied batches, then the swap).
COMMAND = """
import os, signal, sys
import qres.backends.embedded as embedded
import qres.indexing.pipeline as pipeline
from qres.cli import cli

kill_at, args = int(sys.argv[1]), sys.argv[2:]
calls = []

def counted(real):
    def wrapper(*a, **kw):
        calls.append(1)
        if len(calls) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*a, **kw)
    return wrapper

if kill_at > 0:
    embedded.EmbeddedBackend._copy = counted(embedded.EmbeddedBackend._copy)
    embedded.EmbeddedBackend.finish_rebuild = counted(embedded.EmbeddedBackend.finish_rebuild)
    if "--rebuild" in args:
        embedded.EmbeddedBackend.upsert = counted(embedded.EmbeddedBackend.upsert)
cli(args, standalone_mode=True)
"""


def qres(index_dir, *args, kill_at: int = 0):
    return python(COMMAND, kill_at, "--index-dir", index_dir, *args, timeout=180)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("interrupted")
    questions = make_corpus(N, seed=3)
    model = write_model(root / "model")
    from qres.encoders.runtime import Encoder

    return {
        "questions": questions,
        "corpus": write_tsv(root / "corpus.tsv", questions),
        "model": model,
        "encoder": Encoder.load(model),
    }


def leftover_of(index_dir):
    return index_dir.with_name(index_dir.name + ".rebuild")


def assert_exact(index_dir, world):
    with EmbeddedBackend(index_dir) as b:
        assert assert_committed_prefix(b, world["questions"]) == N
        assert vector_mismatches(b, world["encoder"], world["questions"]) == 0


def assert_named_then_removed(index_dir, world):
    """`qres info` names the leftover (and leaves it), the next write removes it, saying so."""
    work = leftover_of(index_dir)
    assert work.is_dir()
    info = qres(index_dir, "info", "--json")
    assert info.returncode == 0, info.stderr
    details = json.loads(info.stdout)
    key = f"leftover {work}"
    assert key in details and "interrupted rebuild or compaction" in details[key], details
    assert work.is_dir()  # a reader never touches it
    assert_exact(index_dir, world)  # nor does the kill harm the live index
    again = qres(index_dir, "index", world["corpus"], "--model", world["model"])
    assert again.returncode == 0, again.stderr
    assert f"removed {work}" in again.stderr and "interrupted rebuild" in again.stderr
    assert not work.exists()
    assert_exact(index_dir, world)


@pytest.mark.parametrize("seed", range(2))
def test_kill_9_during_a_rebuild(world, tmp_path, seed):
    index_dir = tmp_path / "ix"
    assert qres(index_dir, "index", world["corpus"], "--model", world["model"]).returncode == 0
    kill_at = random.Random(seed).randint(1, N // 50 + 1)  # a batch, or the swap
    proc = qres(
        index_dir, "index", world["corpus"], "--model", world["model"], "--rebuild",
        "--batch-size", "50", kill_at=kill_at,
    )  # fmt: skip
    assert proc.returncode == -9, proc.stderr
    assert_named_then_removed(index_dir, world)


@pytest.mark.parametrize("seed", range(2))
def test_kill_9_during_compact(world, tmp_path, seed):
    index_dir = tmp_path / "ix"
    for _ in range(2):  # the second run leaves N dead vector rows to reclaim
        assert qres(index_dir, "index", world["corpus"], "--model", world["model"]).returncode == 0
    proc = qres(index_dir, "compact", kill_at=1 + seed)  # the copy, or the swap after it
    assert proc.returncode == -9, proc.stderr
    assert_named_then_removed(index_dir, world)


def test_kill_9_during_automatic_compaction(world, tmp_path):
    index_dir = tmp_path / "ix"
    again = (world["corpus"], "--model", world["model"], "--rewrite")  # every run replaces all
    for _ in range(2):  # 2 x N = 1,200 rows: not yet over the 1,000 dead-row threshold
        assert qres(index_dir, "index", *again).returncode == 0
    proc = qres(index_dir, "index", *again, kill_at=2)
    assert proc.returncode == -9, proc.stderr  # the third run crossed it and compacted
    assert_named_then_removed(index_dir, world)
