"""Distillation (``qres train --teacher DIR``): the encoder learns to reproduce a teacher
encoder's similarities between unlabelled questions.

The teacher is any qres model directory, run by qres's own onnxruntime encoder
(:class:`qres.encoders.runtime.Encoder`), e.g. a transformer made by ``qres import-encoder``. The
unlabelled pool is the labelled data's training questions (never its dev questions) plus
every ``--unlabelled`` corpus (any format ``qres index`` reads), repeated texts once.

The teacher encodes the pool once. Its vectors are cached on disk per teacher fingerprint,
``$QRES_HOME/cache/teacher/FINGERPRINT.npz``, each row keyed by the hash of the question's
title and body, so a second run, or a run over a larger pool, encodes only the questions the
cache lacks.

Each training step draws ``distill_anchors`` questions of the pool at random and, with each,
``distill_neighbours`` of its 10 nearest questions by the teacher: random questions alone are
mostly unrelated, and the in-batch similarities would then teach little about telling close
questions apart, which is the task. The loss is
:func:`qres.training.losses.similarity_distillation_loss` over that batch.
"""

from __future__ import annotations

import hashlib
import time
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from qres import paths
from qres.corpus.readers import Question, read_corpus
from qres.encoders.vocab import Vocab
from qres.training.config import TrainError
from qres.training.data import TokenizedQuestions, TrainingData

NEAREST = 10  # neighbours of an anchor are drawn from its this many nearest by the teacher
HELDOUT_FRACTION = 0.1  # train queries held out to choose the epoch (dev is never read)


def cache_dir() -> Path:
    return paths.home() / "cache" / "teacher"


def load_teacher(model_dir: str | Path):
    """The teacher's :class:`qres.encoders.runtime.Encoder`; a bad directory is a
    :class:`TrainError`."""
    from qres.encoders.runtime import Encoder, EncoderError

    try:
        return Encoder.load(model_dir)
    except EncoderError as err:
        raise TrainError(f"--teacher {err}") from None


def read_unlabelled(files: Sequence[str | Path]) -> list[Question]:
    """Every question of the ``--unlabelled`` corpora (``qres.corpus.readers`` readers)."""
    return [q for path in files for q in read_corpus(path)]


def distillation_pool(data: TrainingData, unlabelled: Iterable[Question]) -> list[Question]:
    """The training questions of ``data`` and ``unlabelled``, each text once, empty ones out."""
    seen: set[tuple[str, str]] = set()
    pool = []
    for q in [*(data.questions[i] for i in data.vocab_ids), *unlabelled]:
        if q.text and (q.title, q.body) not in seen:
            seen.add((q.title, q.body))
            pool.append(Question(str(len(pool)), q.title, q.body))
    return pool


def question_key(q: Question) -> str:
    return hashlib.sha256(f"{q.title}\0{q.body}".encode()).hexdigest()[:32]


def teacher_vectors(teacher, questions: Sequence[Question], folder: Path) -> tuple[np.ndarray, int]:
    """The teacher's unit vectors [n, dim] of ``questions`` and how many had to be encoded:
    the rest come from ``folder/FINGERPRINT.npz``, which the new ones are added to."""
    path = folder / f"{teacher.fingerprint}.npz"
    keys, vectors = _read_cache(path, teacher) if path.exists() else ([], None)
    row = {k: n for n, k in enumerate(keys)}
    wanted = [question_key(q) for q in questions]
    missing = list(dict.fromkeys(k for k in wanted if k not in row))
    if missing:
        by_key = {k: q for k, q in zip(wanted, questions, strict=True)}
        new = _encode(teacher, [by_key[k] for k in missing])
        keys = [*keys, *missing]
        vectors = new if vectors is None else np.concatenate([vectors, new])
        _write_cache(path, teacher, keys, vectors)
        row = {k: n for n, k in enumerate(keys)}
    if not wanted:
        return np.zeros((0, teacher.dim), dtype=np.float32), 0
    return vectors[[row[k] for k in wanted]], len(missing)


def _encode(teacher, questions: list[Question]) -> np.ndarray:
    try:
        vectors = teacher.encode_questions(questions)
    except ValueError as err:  # the graph's output does not fit the card's dim
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise TrainError(
            f"--teacher {teacher.model_dir}: its graph does not give the {teacher.dim}-d "
            f"vectors its card states ({first})"
        ) from None
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-8)).astype(np.float32)


def _read_cache(path: Path, teacher) -> tuple[list[str], np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as cache:
            fingerprint = str(cache["fingerprint"])
            keys, vectors = [str(k) for k in cache["keys"]], cache["vectors"].astype(np.float32)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as err:
        raise TrainError(f"{path}: unreadable teacher-vector cache ({err}); delete it") from None
    if fingerprint != teacher.fingerprint or vectors.shape != (len(keys), teacher.dim):
        raise TrainError(
            f"{path}: teacher-vector cache of fingerprint {fingerprint[:12]} with "
            f"{vectors.shape[1] if vectors.ndim == 2 else '?'}-d vectors, not the "
            f"{teacher.dim}-d vectors of teacher {teacher.model_dir} "
            f"({teacher.fingerprint[:12]}); delete it"
        )
    return keys, vectors


def _write_cache(path: Path, teacher, keys: list[str], vectors: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, fingerprint=teacher.fingerprint, keys=np.array(keys), vectors=vectors)
    tmp.replace(path)


def nearest(vectors: np.ndarray, k: int, block: int = 1024) -> np.ndarray:
    """[n, k] rows of each vector's k nearest others by cosine (unordered)."""
    n = len(vectors)
    k = min(k, n - 1)
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, block):
        sims = vectors[start : start + block] @ vectors.T
        sims[np.arange(len(sims)), np.arange(start, start + len(sims))] = -np.inf
        out[start : start + len(sims)] = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    return out


@dataclass
class Distillation:
    """The pool's tokens and teacher vectors, and how a step's batch is drawn."""

    tokens: TokenizedQuestions  # pool ids are "0" .. "n-1"
    teacher: torch.Tensor  # [n, teacher dim]
    neighbours: np.ndarray  # [n, NEAREST]
    anchors: int
    per_anchor: int

    def batch(self, rng: np.random.Generator) -> tuple[list[str], torch.Tensor]:
        """Pool ids of a step's batch and their teacher vectors."""
        chosen = rng.choice(
            len(self.teacher), size=min(self.anchors, len(self.teacher)), replace=False
        )
        rows = [int(a) for a in chosen]
        take = min(self.per_anchor, self.neighbours.shape[1])
        for a in chosen:
            rows += [int(r) for r in rng.choice(self.neighbours[a], size=take, replace=False)]
        rows = list(dict.fromkeys(rows))
        return [str(r) for r in rows], self.teacher[rows]


def prepare(config, teacher, pool: list[Question], vocab: Vocab, log) -> tuple:
    """The :class:`Distillation` of ``pool`` and what run.json records about it."""
    if len(pool) < 2:
        raise TrainError("distillation needs at least 2 questions with text in the pool")
    started = time.perf_counter()
    vectors, encoded = teacher_vectors(teacher, pool, cache_dir())
    seconds = time.perf_counter() - started
    log(
        f"teacher vectors of {len(pool)} questions: {encoded} encoded, "
        f"{len(pool) - encoded} from the cache ({seconds:.0f}s)"
    )
    distill = Distillation(
        tokens=TokenizedQuestions(
            {q.id: q for q in pool}, vocab, config.title_max, config.body_max
        ),
        teacher=torch.from_numpy(vectors),
        neighbours=nearest(vectors, NEAREST),
        anchors=config.distill_anchors,
        per_anchor=config.distill_neighbours,
    )
    record = {
        "teacher": str(config.teacher),
        "fingerprint": teacher.fingerprint,
        "architecture": teacher.card.get("architecture"),
        "dim": teacher.dim,
        "pool_questions": len(pool),
        "unlabelled_files": list(config.unlabelled),
        "encoded": encoded,
        "encode_seconds": round(seconds, 1),
    }
    return distill, record
