"""The indexing pipeline: read → (encode in batches) → upsert → commit every N questions.

:class:`Index` is the library's way in (``Index.open(dir, model=...).add(questions)``);
``qres index`` runs the same :func:`index_questions`.

Each batch is upserted by id, so re-running over the same corpus replaces rather than
duplicates; commits every ``commit_every`` questions bound what an interruption can lose
(the next run re-writes it). A question id seen twice in one run keeps its last version.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from qres.backends.base import Backend, BackendError
from qres.corpus import Question, read_corpus


@dataclass
class IndexReport:
    indexed: int = 0
    duplicates: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def docs_per_second(self) -> float:
        return self.indexed / self.seconds if self.seconds else 0.0


def index_questions(
    backend: Backend,
    questions: Iterable[Question],
    encoder=None,
    batch_size: int = 256,
    commit_every: int = 20_000,
    on_batch: Callable[[int], None] | None = None,
) -> IndexReport:
    """Upsert ``questions`` into ``backend``; with ``encoder`` (a :class:`qres.encoder.Encoder`)
    each question's vector is stored too. ``on_batch(n)`` is called after each batch."""
    if encoder is not None:
        _record_model(backend, encoder)
    report = IndexReport()
    seen: set[str] = set()
    start = time.perf_counter()
    pending: list[Question] = []
    since_commit = 0

    def flush() -> None:
        nonlocal since_commit
        if not pending:
            return
        for q in pending:
            if q.id in seen:
                report.duplicates += 1
            seen.add(q.id)
        vectors = encoder.encode_questions(pending) if encoder is not None else None
        backend.upsert(pending, vectors)
        report.indexed += len(pending)
        since_commit += len(pending)
        if since_commit >= commit_every:
            backend.commit()
            since_commit = 0
        if on_batch:
            on_batch(len(pending))
        pending.clear()

    reading = iter(questions)
    try:
        while True:
            try:
                question = next(reading)
            except StopIteration:
                break
            except BaseException:
                # Whatever stopped the reader (a bad record, an unreadable file, Ctrl-C), keep
                # every good question it read before that.
                flush()
                raise
            pending.append(question)
            if len(pending) >= batch_size:
                flush()
        flush()
    except KeyboardInterrupt:
        flush()  # Ctrl-C while a batch was being encoded or written: finish that batch
        raise
    finally:
        if sys.exc_info()[0] is None:
            backend.commit()
        else:  # the error that stopped the run is the one to report, not a commit failing after
            with contextlib.suppress(Exception):  # it for the same cause (a full disk)
                backend.commit()
    report.indexed -= report.duplicates
    report.seconds = time.perf_counter() - start
    return report


def _record_model(backend: Backend, encoder) -> None:
    """Refuse to mix vectors of two models in one index; record the model otherwise.

    The writer's lock comes first: a second writer is turned away before it changes
    anything, and the check sees what the last writer recorded."""
    backend.acquire_write_lock()
    meta = backend.metadata()
    held = meta.get("model_fingerprint")
    if held not in (None, encoder.fingerprint) and backend.count() > 0:
        raise BackendError(
            f"this index holds vectors of model {held[:12]}, not {encoder.fingerprint[:12]}: "
            "re-index everything with `qres index CORPUS --model MODEL_DIR --rebuild`"
        )
    backend.set_metadata(
        {
            "model_fingerprint": encoder.fingerprint,
            "vector_dim": encoder.dim,
            "model_dir": str(Path(encoder.model_dir).resolve()),
        }
    )


def search_encoder(model_dir: str | Path, device: str | None = None):
    """The encoder of a model whose score search can compute (not a BOW-CNN's); ``device``
    as for :meth:`qres.encoder.Runtime.from_env`."""
    from qres.encoder import Encoder, Runtime
    from qres.model import open_model

    model = open_model(model_dir)
    model.require_search_scorer()
    return Encoder.from_model(model, runtime=Runtime.from_env(device))


def check_keeps_vectors(backend: Backend, encoder) -> None:
    """Refuse to add questions without vectors to an index whose questions have them."""
    meta = backend.metadata()
    if encoder is None and meta.get("model_fingerprint") and backend.count() > 0:
        raise BackendError(
            "this index stores dense vectors: pass --model "
            f"{meta.get('model_dir', 'MODEL_DIR')} (or --rebuild without vectors)"
        )


class Index:
    """An index opened for adding questions, with the encoder that gives their vectors.

    >>> with Index.open("my-index", model="qres/models/default") as index:
    ...     index.add(read_corpus("qres/data/demo/questions.tsv"))
    """

    def __init__(self, backend: Backend, encoder=None):
        check_keeps_vectors(backend, encoder)
        self.backend, self.encoder = backend, encoder

    @classmethod
    def open(
        cls,
        index_dir: str | Path | None = None,
        model: str | Path | None = None,
        *,
        backend: str | None = None,
        **settings,
    ) -> Index:
        """The index at ``index_dir`` (default ``$QRES_HOME/index``), created if missing
        (``settings``: analyzer, title_boost, ... as for :func:`qres.backends.open_backend`);
        ``model``: a ``qres export-onnx`` directory whose vectors are stored too."""
        from qres import paths
        from qres.backends import open_backend

        encoder = search_encoder(model) if model is not None else None
        store = open_backend(
            backend, index_dir or paths.default_index_dir(), create=True, **settings
        )
        try:
            return cls(store, encoder)
        except BaseException:
            store.close()
            raise

    def add(
        self,
        questions: Iterable[Question] | str | Path,
        batch_size: int = 256,
        on_batch: Callable[[int], None] | None = None,
    ) -> IndexReport:
        """Add or replace ``questions`` (or those of a corpus file) by id; committed."""
        if isinstance(questions, str | Path):
            questions = read_corpus(questions)
        return index_questions(self.backend, questions, self.encoder, batch_size, on_batch=on_batch)

    def count(self) -> int:
        return self.backend.count()

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.backend.__exit__(*exc)  # a rebuild (rebuild=True) is finished, or dropped on error
