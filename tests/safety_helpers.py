"""Helpers of the data-safety tests: a synthetic corpus, a tiny real ONNX model for it, and
the checks (committed prefix, vectors equal to fresh encodings) every crash test makes.

The model is the hand-built bag-of-words graph of ``tests/test_encoder.py`` over this
corpus's vocabulary, so every question gets its own vector and a vector stored in the wrong
row shows at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

from qres.corpus.readers import Question
from qres.encoders.runtime import CARD_FORMAT, fingerprint
from qres.encoders.vocab import Vocab
from tests.test_encoder import bag_of_words_graph

REPO = Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(500)]
# Subprocesses: one thread each for onnxruntime and numpy (the CI machine has two cores).
CHILD_ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "PYTHONPATH": str(REPO),
}


def make_corpus(n: int, seed: int = 0, prefix: str = "q") -> list[Question]:
    rng = np.random.default_rng(seed)
    return [
        Question(
            f"{prefix}{i}",
            " ".join(rng.choice(WORDS, 4)),
            " ".join(rng.choice(WORDS, 8)),
            ("t",) if i % 3 == 0 else (),
        )
        for i in range(n)
    ]


def write_tsv(path: Path, questions: list[Question]) -> Path:
    lines = ["id\ttitle\tbody\ttags"]
    lines += [f"{q.id}\t{q.title}\t{q.body}\t{','.join(q.tags)}" for q in questions]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_model(path: Path, dim: int = 16, seed: int = 0, vocab: Vocab | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    vocab = vocab or Vocab.from_words(WORDS)
    table = np.random.default_rng(seed).normal(size=(len(vocab), dim)).astype(np.float32)
    onnx.save(bag_of_words_graph(table), path / "model.onnx")
    vocab.save(path / "vocab.txt")
    card = {
        "format": CARD_FORMAT,
        "architecture": "bag-of-words (test)",
        "dim": dim,
        "graphs": {"title": "model.onnx", "body": "model.onnx"},
        "max_title_tokens": 40,
        "max_body_tokens": 100,
        "tokenizer": "qres.text.tokenize",
        "fingerprint": fingerprint(path, ["model.onnx"]),
    }
    (path / "model.json").write_text(json.dumps(card))
    return path


def present(backend, questions: list[Question]) -> list[Question]:
    found = backend.fetch([q.id for q in questions])
    return [q for q in questions if q.id in found]


def assert_committed_prefix(backend, questions: list[Question]) -> int:
    """The index holds exactly the first n questions, stored as given; returns n."""
    held = present(backend, questions)
    n = len(held)
    assert [q.id for q in held] == [q.id for q in questions[:n]], "not a prefix"
    assert backend.count() == n
    stored = backend.fetch([q.id for q in held])
    assert all(stored[q.id] == q for q in held)
    return n


def vector_mismatches(backend, encoder, questions: list[Question]) -> int:
    """How many of ``questions`` lack a vector or hold one unlike a fresh encoding."""
    if not questions:
        return 0
    got, has = backend.vectors([q.id for q in questions])
    want = encoder.encode_questions(questions)
    close = np.abs(got - want).max(axis=1) < 2e-2  # float16 storage
    return int((~(has & close)).sum())


def python(code: str, *args, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=CHILD_ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )
