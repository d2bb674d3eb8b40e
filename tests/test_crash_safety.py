"""The data-safety audit as a permanent suite (issue 10): kill -9 at seeded points during
indexing, readers beside a writer, and rebuilds under a long-lived reader. Each checks
what a user relies on: the index opens, holds a committed prefix of the corpus, every
stored vector equals a fresh encoding of its question, and a re-run ends at the exact count.

The indexing runs in subprocesses with a tiny real ONNX model (tests/safety_helpers.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from qres.backends.embedded import EmbeddedBackend
from qres.encoders.runtime import Encoder
from qres.ranking.search import SearchPipeline
from tests.safety_helpers import (
    CHILD_ENV,
    assert_committed_prefix,
    make_corpus,
    python,
    vector_mismatches,
    write_model,
    write_tsv,
)

pytestmark = pytest.mark.slow

N, COMMIT_EVERY, BATCH = 2000, 200, 40

# Indexes the corpus from its start and SIGKILLs itself at a point chosen by the seed: after
# the n-th batch, half-way through the n-th vector write (a torn row), after the n-th fsync
# of the vector file (before tantivy commits), or after a random delay. Seed -1: no kill.
INDEXER = f"""
import os, random, signal, sys, threading
from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import read_corpus
from qres.encoders.runtime import Encoder
from qres.indexing.pipeline import index_questions

index_dir, corpus, model, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
encoder = Encoder.load(model)
rng = random.Random(seed)
site = ("batch", "torn-write", "before-commit", "timer")[seed % 4]
last = {N // COMMIT_EVERY} if site == "before-commit" else {N // BATCH}
nth = rng.randint(1, last)
calls = []

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def counted(real, torn=False):
    def wrapper(fd, *args):
        calls.append(1)
        if len(calls) == nth:
            if torn:
                data, offset = args
                real(fd, bytes(data)[: len(data) // 2 + 3], offset)
            else:
                real(fd, *args)
            die()
        return real(fd, *args)
    return wrapper

on_batch = None
if seed >= 0 and site == "batch":
    on_batch = lambda n: calls.append(1) or (len(calls) == nth and die())
elif seed >= 0 and site == "torn-write":
    os.pwrite = counted(os.pwrite, torn=True)
elif seed >= 0 and site == "before-commit":
    os.fsync = counted(os.fsync)
elif seed >= 0:
    threading.Timer(rng.uniform(0.05, 1.5), die).start()
with EmbeddedBackend(index_dir, create=True) as backend:
    index_questions(backend, read_corpus(corpus), encoder=encoder, batch_size={BATCH},
                    commit_every={COMMIT_EVERY}, on_batch=on_batch)
os._exit(0)
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("safety")
    questions = make_corpus(N, seed=1)
    model = write_model(root / "model")
    return {
        "root": root,
        "questions": questions,
        "corpus": write_tsv(root / "corpus.tsv", questions),
        "reversed": write_tsv(root / "reversed.tsv", questions[::-1]),
        "model": model,
        "encoder": Encoder.load(model),
    }


def test_kill_9_at_20_seeded_points_keeps_a_committed_prefix_with_aligned_vectors(world, tmp_path):
    questions, encoder, index_dir = world["questions"], world["encoder"], tmp_path / "ix"
    killed = []
    for seed in range(20):
        proc = python(INDEXER, index_dir, world["corpus"], world["model"], seed)
        assert proc.returncode in (0, -9), proc.stderr
        killed.append(proc.returncode == -9)
        with EmbeddedBackend(index_dir) as b:
            n = assert_committed_prefix(b, questions)
            assert n % COMMIT_EVERY == 0 or n == N, n
            assert vector_mismatches(b, encoder, questions[:n]) == 0, f"seed {seed}"
    assert sum(killed) >= 15, killed  # most runs die before the end of the corpus
    proc = python(INDEXER, index_dir, world["corpus"], world["model"], -1)
    assert proc.returncode == 0, proc.stderr
    with EmbeddedBackend(index_dir) as b:
        assert assert_committed_prefix(b, questions) == N
        assert vector_mismatches(b, encoder, questions) == 0
        assert b.storage()["dead_vector_rows"] > 0  # the crashed runs' rows
        b.compact()
        assert b.storage() == {"vector_rows": N, "dead_vector_rows": 0}
        assert assert_committed_prefix(b, questions) == N
        assert vector_mismatches(b, encoder, questions) == 0


# A reader process: searches and checks each hit's stored vector against a fresh encoding
# of the stored question, and that the index always holds the whole corpus.
READER = """
import json, random, sys, time
from pathlib import Path
import numpy as np
from qres.backends.embedded import EmbeddedBackend
from qres.encoders.runtime import Encoder
from qres.ranking.search import SearchPipeline

index_dir, model, stop = sys.argv[1], sys.argv[2], Path(sys.argv[3])
seed, n = int(sys.argv[4]), int(sys.argv[5])
encoder = Encoder.load(model)
rng = random.Random(seed)
stats = {"searches": 0, "checks": 0, "errors": 0, "first_error": None}
def error(message):
    stats["errors"] += 1
    stats["first_error"] = stats["first_error"] or message
backend = EmbeddedBackend(index_dir)
pipeline = SearchPipeline(backend, encoder)
end = time.monotonic() + 90  # a hard bound, should the writer never finish
while not stop.exists() and time.monotonic() < end:
    try:
        query = f"w{rng.randrange(500)} w{rng.randrange(500)} w{rng.randrange(500)}"
        results = pipeline.search(query, 10, "hybrid")
        stats["searches"] += 1
        stored = backend.fetch([r.id for r in results])
        want = encoder.encode_questions([stored[r.id] for r in results])
        got, has = backend.vectors([r.id for r in results])
        stats["checks"] += len(results)
        if not has.all() or np.abs(got - want).max(initial=0) > 2e-2:
            error(f"wrong vector for {query!r}")
        if backend.count() != n:
            error(f"count {backend.count()} != {n}")
    except Exception as err:
        error(f"{type(err).__name__}: {err}")
print(json.dumps(stats))
"""

# The writer: re-indexes the corpus (commits every 100) for at least two rounds and the given
# seconds, compacting after the first round; then tells the readers to stop.
WRITER = """
import sys, time
from pathlib import Path
from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import read_corpus
from qres.encoders.runtime import Encoder
from qres.indexing.pipeline import index_questions

index_dir, corpus, model = sys.argv[1], sys.argv[2], sys.argv[3]
seconds, stop = float(sys.argv[4]), Path(sys.argv[5])
encoder = Encoder.load(model)
end, rounds = time.monotonic() + seconds, 0
with EmbeddedBackend(index_dir) as backend:
    while rounds < 2 or time.monotonic() < end:
        index_questions(backend, read_corpus(corpus), encoder=encoder, batch_size=50,
                        commit_every=100)
        rounds += 1
        if rounds == 1:
            backend.compact()
stop.touch()
print(rounds)
"""


def _start(code, *args):
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        env=CHILD_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_readers_beside_a_writer_see_no_errors(world, tmp_path):
    questions, index_dir, seconds = world["questions"], tmp_path / "ix", 8
    proc = python(INDEXER, index_dir, world["corpus"], world["model"], -1)
    assert proc.returncode == 0, proc.stderr
    stop = tmp_path / "stop"
    writer = _start(WRITER, index_dir, world["corpus"], world["model"], seconds, stop)
    readers = [
        _start(READER, index_dir, world["model"], stop, seed, len(questions)) for seed in range(2)
    ]
    outputs = [r.communicate(timeout=120) for r in readers]
    rounds, werr = writer.communicate(timeout=120)
    assert writer.returncode == 0, werr
    assert int(rounds) >= 2  # at least a compaction and a full re-index under the readers
    for (out, err), reader in zip(outputs, readers, strict=True):
        assert reader.returncode == 0, err
        stats = json.loads(out)
        assert stats["errors"] == 0, stats
        assert stats["searches"] > 20 and stats["checks"] > 100, stats


def test_rebuilds_under_a_long_lived_reader_keep_its_vectors_right(world, tmp_path):
    questions, encoder, index_dir = world["questions"], world["encoder"], tmp_path / "ix"
    by_id = {q.id: q for q in questions}
    proc = python(INDEXER, index_dir, world["corpus"], world["model"], -1)
    assert proc.returncode == 0, proc.stderr
    reader = EmbeddedBackend(index_dir)
    pipeline = SearchPipeline(reader, encoder)
    cli = "import sys; from qres.cli import main; sys.argv = ['qres'] + sys.argv[1:]; main()"
    searches = errors = swaps = 0
    identity = reader._identity
    for corpus in (world["reversed"], world["corpus"], world["reversed"]):
        rebuild = _start(
            cli, "--index-dir", index_dir, "index", corpus, "--model", world["model"], "--rebuild"
        )
        while rebuild.poll() is None or searches < 5:
            query = f"{questions[searches % N].title}"
            results = pipeline.search(query, 10, "dense")
            fresh = encoder.encode_questions([by_id[r.id] for r in results])
            cosines = fresh @ encoder.encode_query(query)
            errors += sum(abs(r.cosine - c) > 2e-2 for r, c in zip(results, cosines, strict=True))
            errors += reader.count() != N
            searches += 1
            if reader._identity != identity:
                swaps, identity = swaps + 1, reader._identity
        assert rebuild.returncode == 0, rebuild.stderr.read()
    assert vector_mismatches(reader, encoder, questions) == 0
    assert errors == 0 and searches >= 15, (errors, searches)
    assert swaps >= 1  # the reader followed at least one swap while it searched
    reader.close()
