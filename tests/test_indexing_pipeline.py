"""The staged indexing pipeline: same index whatever runs where, errors and kills handled."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from qres.backends.base import BackendError
from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import CorpusError, Question, read_corpus
from qres.encoders.runtime import Encoder
from qres.indexing import pipeline as indexing
from qres.indexing.pipeline import index_questions

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "qres" / "data" / "demo" / "questions.tsv"


def snapshot(backend: EmbeddedBackend, ids):
    vectors, has = backend.vectors(ids)
    return backend.fetch(ids), vectors, has, [h.id for h in backend.search("usb boot", 20)]


def test_worker_processes_build_the_same_index_as_threads(tmp_path, monkeypatch):
    submitted = []

    class CountingPool(indexing.ProcessPoolExecutor):
        def submit(self, fn, *args, **kwargs):
            submitted.append(len(args[0]))
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(indexing, "ProcessPoolExecutor", CountingPool)
    encoder = Encoder.load(REPO / "qres" / "models" / "default")
    questions = list(read_corpus(DEMO))
    ids = [q.id for q in questions]
    got = []
    for workers in (0, 1):
        backend = EmbeddedBackend(tmp_path / f"w{workers}", create=True)
        report = index_questions(backend, questions, encoder, batch_size=50, workers=workers)
        assert report.indexed == len(questions) == backend.count()
        got.append(snapshot(backend, ids))
        backend.close()
    assert sum(submitted) == len(questions) - 50  # all but the first batch went to a worker
    (fetched0, vectors0, has0, top0), (fetched1, vectors1, has1, top1) = got
    assert fetched0 == fetched1 and top0 == top1 and has0.all() and has1.all()
    np.testing.assert_array_equal(vectors0, vectors1)
    np.testing.assert_allclose(vectors0, encoder.encode_questions(questions), atol=1e-3)


class FailingBackend(EmbeddedBackend):
    def __init__(self, *args, fail_at: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.fail_at, self.batches = fail_at, 0

    def upsert(self, questions, vectors=None, terms=None):
        self.batches += 1
        if self.batches == self.fail_at:
            raise BackendError("disk full")
        super().upsert(questions, vectors, terms)


def test_a_write_error_reaches_the_caller_and_keeps_what_was_written(tmp_path):
    before = threading.active_count()
    backend = FailingBackend(tmp_path / "ix", create=True, fail_at=3)
    questions = [Question(f"q{i}", f"title {i}", "body") for i in range(100)]
    with pytest.raises(BackendError, match="disk full"):
        index_questions(backend, questions, batch_size=10, workers=0)
    assert backend.count() == 20  # the two batches written before the failure
    assert threading.active_count() == before  # no stage thread left behind
    backend.close()


def test_an_interrupt_while_reading_keeps_a_prefix_and_the_same_run_again_completes(tmp_path):
    questions = [Question(f"q{i}", f"title {i}", "body") for i in range(25)]

    def interrupted():
        yield from questions
        raise KeyboardInterrupt

    backend = EmbeddedBackend(tmp_path / "ix", create=True)
    said = []
    with pytest.raises(KeyboardInterrupt):
        index_questions(
            backend, interrupted(), batch_size=10, workers=0, on_stopping=lambda: said.append(1)
        )
    assert said == [1]
    kept = backend.count()
    assert kept in (0, 10, 20)  # whole batches: those past the encoder when it stopped
    assert set(backend.fetch([q.id for q in questions])) == {f"q{i}" for i in range(kept)}
    report = index_questions(backend, questions, batch_size=10, workers=0, skip_unchanged=True)
    assert backend.count() == 25 and report.unchanged == kept
    backend.close()


def test_a_bad_record_with_worker_processes_keeps_what_came_before(tmp_path):
    corpus = tmp_path / "c.tsv"
    corpus.write_text(
        "id\ttitle\tbody\n" + "".join(f"q{i}\tt {i}\tb\n" for i in range(7)) + "broken\n"
    )
    backend = EmbeddedBackend(tmp_path / "ix", create=True)
    with pytest.raises(CorpusError, match=r"c\.tsv:9"):
        index_questions(backend, read_corpus(corpus), batch_size=3, workers=1)
    assert backend.count() == 7
    backend.close()


def test_killed_during_indexing_keeps_the_commits_and_a_rerun_completes(tmp_path):
    """kill -9 from the writer stage mid-run: committed batches survive, with their vectors."""
    path = tmp_path / "ix"
    script = textwrap.dedent(
        f"""
        import os, signal, numpy as np
        from qres.backends.embedded import EmbeddedBackend
        from qres.corpus.readers import Question
        from qres.indexing.pipeline import index_questions

        class Encoder:
            fingerprint, dim, model_dir = "f" * 64, 4, "."
            def tokenizer(self):
                return lambda qs: [len(q.title) for q in qs]
            def encode_tokens(self, tokens, batch_size=256, progress=None):
                return np.tile(np.array(tokens, np.float32)[:, None], (1, 4)) / 100

        written = 0
        def on_batch(n):
            global written
            written += n
            if written >= 2500:
                os.kill(os.getpid(), signal.SIGKILL)

        b = EmbeddedBackend({str(path)!r}, create=True)
        questions = (Question(f"q{{i}}", "t" * (i % 50 + 1), "body") for i in range(5000))
        index_questions(b, questions, Encoder(), batch_size=100, commit_every=1000,
                        on_batch=on_batch, workers=0)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], env=os.environ.copy(), timeout=120)
    assert proc.returncode == -9
    backend = EmbeddedBackend(path)
    committed = backend.count()
    assert committed in (1000, 2000)  # whole commits only
    ids = [f"q{i}" for i in range(committed)]
    vectors, has = backend.vectors(ids)
    assert has.all()
    expected = np.array([i % 50 + 1 for i in range(committed)], np.float32) / 100
    np.testing.assert_allclose(vectors[:, 0], expected, atol=1e-3)
    rerun = [Question(f"q{i}", "t" * (i % 50 + 1), "body") for i in range(5000)]
    index_questions(backend, rerun, batch_size=500, workers=0)  # completes it
    assert backend.count() == 5000
    backend.close()


def test_the_pipelines_vectors_are_those_of_a_plain_encode(tmp_path):
    from tests.test_encoder_runtime import plain_encode

    questions = list(read_corpus(DEMO))
    backend = EmbeddedBackend(tmp_path / "index", create=True, vector_dtype="float32")
    encoder = Encoder.load(REPO / "qres" / "models" / "default")
    index_questions(backend, questions, encoder, batch_size=100, workers=0)
    stored, has = backend.vectors([q.id for q in questions])
    backend.close()
    assert has.all()
    np.testing.assert_allclose(stored, np.stack([plain_encode(q) for q in questions]), atol=2e-6)


def test_progress_counts_questions_as_they_are_encoded_before_they_are_written(tmp_path):
    from tests.fakes import TableEncoder

    questions = [Question(str(i), f"wifi {i}", "usb") for i in range(250)]
    backend = EmbeddedBackend(tmp_path / "index", create=True)
    models = [
        TableEncoder({"wifi": 0}, fingerprint="a" * 64),
        TableEncoder({"usb": 1}, fingerprint="b" * 64),
    ]
    events = []
    index_questions(
        backend,
        questions,
        models,
        batch_size=100,
        workers=0,
        on_encoded=lambda n: events.append(("encoded", n)),
        on_batch=lambda n: events.append(("written", n)),
    )
    backend.close()
    encoded = [n for kind, n in events if kind == "encoded"]
    assert sum(encoded) == 250 and encoded[:2] == [50, 50]  # half a question per model
    assert events.index(("encoded", 50)) < events.index(("written", 100))
