"""The indexing pipeline: read → prepare → encode → write, as overlapping stages.

The calling thread reads the corpus and cuts it into batches; each batch then goes through
three stages, each in its own thread, joined by small bounded queues (a slow stage holds the
ones before it back instead of piling batches up in memory):

* prepare — the BM25 terms (:meth:`Backend.analysis`) and the encoder's token ids, pure
  Python; with ``workers`` > 0 in that many processes from the second batch on, which is
  what scales on many cores;
* encode — onnxruntime on the token ids (it releases the GIL, so it overlaps the rest);
* write — upsert into the backend and commit every ``commit_every`` questions. Only this
  thread writes, in corpus order, so the crash guarantees are those of one writer: a crash
  or kill loses at most what came after the last commit, and re-running completes it.

:class:`qres.indexing.index.Index` is the library's way in (``Index.open(dir,
model_set=...).add(questions)``); ``qres index`` runs the same :func:`index_questions`.

Each batch is upserted by id, so re-running over the same corpus replaces rather than
duplicates. A question id seen twice in one run keeps its last version.
"""

from __future__ import annotations

import ast
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from qres.backends.base import Backend, BackendError, index_models
from qres.corpus import duplicate_links
from qres.corpus.readers import Question
from qres.encoders.model_set import model_set_of
from qres.workers import STOPPING, ctrl_c_held

QUEUE_DEPTH = 4  # batches waiting between two stages
ENCODE_STAGE = 1  # of prepare, encode, write
COMMIT_EVERY = 20_000  # questions written between two commits: what a crash can cost
# Questions per batch. The encoder sorts a batch by length before cutting it into runs
# (CPU: the encoder's default run size, GRU runs side by side) or running it whole (CUDA),
# so large batches waste little on padding.
CPU_BATCH, GPU_BATCH = 2048, 4096


@dataclass
class IndexReport:
    indexed: int = 0
    duplicates: int = 0
    unchanged: int = 0  # already in the index exactly as read: not written again
    given_new_models: int = 0  # questions held before, given the vectors of models new to it
    seconds: float = 0.0
    skipped: int = 0  # malformed records skipped (skip_bad)
    undecodable: int = 0  # questions holding U+FFFD, what bytes that are not UTF-8 become
    problems: list[str] = field(default_factory=list)  # the first few of them
    pruned: int = 0  # questions deleted as the file no longer holds them (prune)

    @property
    def docs_per_second(self) -> float:
        return self.indexed / self.seconds if self.seconds else 0.0


@dataclass
class _Batch:
    questions: list[Question]
    terms: list | None = None
    tokens: list | None = None
    vectors: object = None


def _whole_runs(encoder) -> bool:
    """Whether ``encoder`` runs on CUDA as a GPU runs best (rows per run bounded by tokens
    alone), rather than as on the CPU (a quantized model keeps the CPU's runs everywhere:
    :func:`qres.encoders.runtime.quantized`)."""
    on_gpu = "CUDAExecutionProvider" in getattr(encoder, "providers", ())
    return on_gpu and not getattr(encoder, "runs_as_on_cpu", False)


def default_batch_size(encoders: list) -> int:
    """:data:`GPU_BATCH` when the models encode on CUDA, the CPU's when one of them keeps the
    CPU's runs (its vectors depend on the questions batched together)."""
    if any(getattr(e, "runs_as_on_cpu", False) for e in encoders):
        return CPU_BATCH
    return GPU_BATCH if any(_whole_runs(e) for e in encoders) else CPU_BATCH


def default_workers() -> int:
    """Processes for the prepare stage: one per core beyond the two the other stages keep
    busy, and one on two cores (reading, analysing and writing in one process share its
    interpreter lock: on 2 cores, 200,000 dump questions went 1.6x faster without a model,
    1.13x with the shipped GRU); none on one core."""
    cores = os.cpu_count() or 1
    return 0 if cores < 2 else min(8, max(1, cores - 2))


def runs_in_main_script() -> bool:
    """Whether this thread was called from the main script's top level, outside an ``if
    __name__ == "__main__":`` block. A worker process starts by running the main script
    again (Python's "spawn"), so such a script would index again in each worker (Python
    refuses that, and the pool breaks or hangs): it prepares its batches in process."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path:  # python -c, a notebook
        return False
    frame = sys._getframe()
    while frame is not None and not (
        frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)
    ):
        frame = frame.f_back
    if frame is None:  # called from a function of the script, or another thread
        return False
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return True
    line = frame.f_lineno
    return not any(
        isinstance(node, ast.If)
        and "__name__" in ast.unparse(node.test)
        and node.lineno <= line <= (node.end_lineno or node.lineno)
        for node in tree.body
    )


def index_questions(
    backend: Backend,
    questions: Iterable[Question],
    encoder=None,
    batch_size: int | None = None,
    commit_every: int = COMMIT_EVERY,
    on_batch: Callable[[int], None] | None = None,
    workers: int | None = None,
    on_encoded: Callable[[float], None] | None = None,
    skip_unchanged: bool = False,
    on_stopping: Callable[[], None] | None = None,
) -> IndexReport:
    """Upsert ``questions`` into ``backend``; with ``encoder`` (a
    :class:`qres.encoders.runtime.Encoder`,
    or a list of them: one vector per model) each question's vectors are stored too; every
    model the index holds must be given; a model new to a non-empty index is first added to
    the questions it holds (:func:`add_models`). ``on_batch(n)`` is called after each batch is
    written, ``on_encoded(n)`` as questions are encoded, within a batch (a share of a
    question per model with several models; without a model, when a batch is prepared), or
    found stored as read;
    ``batch_size`` defaults to :data:`CPU_BATCH`, or :data:`GPU_BATCH` on CUDA; ``workers``
    (default :func:`default_workers`; none from a script's top level:
    :func:`runs_in_main_script`) processes prepare batches; with ``skip_unchanged``, a
    question stored exactly as read is neither encoded nor written. Ctrl-C drops the
    batches not yet encoded, and the one being encoded at the end of its current run; those
    encoded are written first (``on_stopping()`` is called then; a second Ctrl-C drops them
    too)."""
    encoders, given_new_models = _encoders(encoder), 0
    if encoders:  # _record_models takes the writer's lock (which clears what killed jobs left)
        new = _record_models(backend, encoders)
        if new:  # only the new models' vectors are computed for the questions held
            given_new_models = add_models(backend, new)
            _record_models(backend, encoders)
    else:
        backend.acquire_write_lock()
    # Re-indexing a file already indexed is then a no-op: a question stored exactly as read
    # (its vectors are there: every model of the index was given) is not written again.
    compare_stored = skip_unchanged and backend.count() > 0
    if batch_size is None:
        batch_size = default_batch_size(encoders)
    workers = default_workers() if workers is None else workers
    if workers and runs_in_main_script():
        workers = 0
    report = IndexReport(given_new_models=given_new_models)
    seen: set[str] = set()
    start = time.perf_counter()
    since_commit = 0
    flagged = bool(backend.metadata().get(duplicate_links.INDEX_FLAG))
    preparer = _Preparer(backend.analysis(), [e.tokenizer() for e in encoders])
    pool = None
    prepared = 0
    handover: list[str] = []  # the file the workers read the preparer from

    def prepare(batch: list[Question]) -> _Batch | Future:
        # The first batch is prepared here: a corpus that fits in one batch never pays for
        # starting worker processes.
        nonlocal pool, prepared
        prepared += 1
        if workers == 0 or prepared == 1:
            return preparer(batch)
        try:
            with ctrl_c_held():  # the processes started here are born with Ctrl-C blocked
                if pool is None:  # its queues start multiprocessing's resource tracker
                    pool = ProcessPoolExecutor(
                        workers,
                        mp_context=multiprocessing.get_context("spawn"),  # no fork: threads
                        initializer=_start_worker,
                        initargs=(_handed_over(preparer, handover),),
                    )
                return pool.submit(_prepare_in_worker, batch)
        except BrokenProcessPool as err:  # a worker was killed before this batch was handed over
            raise _worker_stopped(err) from None

    def encode(batch: _Batch | Future) -> _Batch:
        if isinstance(batch, Future):
            try:
                batch = batch.result()
            except BrokenProcessPool as err:  # killed: out of memory, or by hand
                raise _worker_stopped(err) from None

        def encoded(n: int) -> None:  # after each run of the batch
            if stages.dropping(ENCODE_STAGE):
                raise _Dropped  # Ctrl-C: the runs left of this batch could take minutes
            if on_encoded:
                on_encoded(n / len(encoders))

        if encoders:
            vectors = {
                e.fingerprint: e.encode_tokens(
                    tokens, len(tokens) if _whole_runs(e) else None, progress=encoded
                )
                for e, tokens in zip(encoders, batch.tokens, strict=True)
            }
            # one model: a plain array, as every backend takes it
            batch.vectors = vectors if len(encoders) > 1 else vectors[encoders[0].fingerprint]
        elif on_encoded:
            on_encoded(len(batch.questions))
        return batch

    def write(batch: _Batch) -> None:
        nonlocal since_commit, flagged
        for q in batch.questions:
            if q.id in seen:
                report.duplicates += 1
            seen.add(q.id)
        backend.upsert(batch.questions, batch.vectors, batch.terms)
        if not flagged and duplicate_links.names_originals(batch.questions):
            backend.set_metadata({duplicate_links.INDEX_FLAG: True})
            flagged = True
        report.indexed += len(batch.questions)
        since_commit += len(batch.questions)
        if since_commit >= commit_every:
            backend.commit()
            since_commit = 0
        if on_batch:
            on_batch(len(batch.questions))

    stages = _Stages([prepare, encode, write])
    pending: list[Question] = []

    def flush() -> None:
        batch = _changed(backend, pending, report) if compare_stored else list(pending)
        if on_encoded and len(batch) < len(pending):  # stored as they are: done too
            on_encoded(len(pending) - len(batch))
        pending.clear()
        if batch:
            stages.put(batch)

    def finish_held(stop: BaseException) -> None:
        """Write what the stages hold before ``stop`` ends the run: after Ctrl-C only what
        is encoded (the batches a transformer holds can be minutes of work; what is dropped,
        running the command again indexes). After Ctrl-C a worker may be gone with
        its batch (one the terminal's Ctrl-C reached while it started): what was written
        before that batch is kept."""
        try:
            if isinstance(stop, KeyboardInterrupt):
                if on_stopping:
                    on_stopping()
                stages.cut(keep_from=ENCODE_STAGE + 1)
            else:
                flush()
                stages.finish()
        except (BrokenProcessPool, ChildProcessError):
            if not isinstance(stop, KeyboardInterrupt):
                raise

    # A rebuild that stops is thrown away whole: nothing read so far is worth finishing.
    kept_when_stopped = not backend.rebuilding
    reading = iter(questions)
    try:
        while True:
            try:
                question = next(reading)
            except StopIteration:
                break
            except BaseException as stop:
                # A bad record or an unreadable file: keep every good question read before it
                # (Ctrl-C: below).
                if kept_when_stopped and not isinstance(stop, KeyboardInterrupt):
                    finish_held(stop)
                raise
            pending.append(question)
            if len(pending) >= batch_size:
                flush()
        flush()
        stages.finish()
    except KeyboardInterrupt as stop:
        # Ctrl-C while reading, handing a batch over or waiting for the stages: write the encoded
        if kept_when_stopped:
            finish_held(stop)
        raise
    finally:
        stages.stop()
        if pool is not None:
            _shut_down(pool)
        for path in handover:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if sys.exc_info()[0] is None:
            backend.commit()
            backend.update_nearest()
        elif kept_when_stopped:  # the error that stopped the run is the one to report, not a
            with contextlib.suppress(Exception):  # commit failing after it for the same cause
                backend.commit()
    report.indexed -= report.duplicates
    report.seconds = time.perf_counter() - start
    return report


def _shut_down(pool: ProcessPoolExecutor) -> None:
    """Shut ``pool`` down and wait for its workers to end (each once it has prepared the batch
    in hand) whatever Ctrl-C is pressed: cut short, it left a worker and then this process
    waiting for ever. Waited for by their processes (a join of the pool's thread cut short
    is not to be trusted: :class:`_Stages`), not killed (one killed mid-answer hangs the pool)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    _uncut(lambda: pool.shutdown(wait=False, cancel_futures=True))
    for worker in workers:
        _uncut(worker.join)


class _Preparer:
    """A batch's BM25 terms and token ids; picklable, so worker processes can run it."""

    def __init__(self, analysis: Callable | None, tokenizers: list[Callable]):
        self.analysis, self.tokenizers = analysis, tokenizers

    def __call__(self, questions: list[Question]) -> _Batch:
        return _Batch(
            questions,
            terms=self.analysis(questions) if self.analysis else None,
            tokens=[tokenize(questions) for tokenize in self.tokenizers],
        )


_worker_preparer: _Preparer | None = None


def _handed_over(preparer: _Preparer, files: list[str]) -> str:
    """A file holding ``preparer`` for the workers to read (appended to ``files``). Handed
    over in the arguments of their start, its vocabularies (megabytes) made starting a worker
    wait until it had read them, and for ever where Ctrl-C killed it while it started."""
    fd, path = tempfile.mkstemp(prefix="qres-index-", suffix=".pickle")
    files.append(path)
    with os.fdopen(fd, "wb") as out:
        pickle.dump(preparer, out, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _start_worker(preparer_file: str) -> None:
    global _worker_preparer
    for stopping in STOPPING:  # born blocked (qres.workers), ignored where blocking is not possible
        signal.signal(stopping, signal.SIG_IGN)
    with open(preparer_file, "rb") as source:
        _worker_preparer = pickle.load(source)
    threading.Thread(target=_exit_with_parent, name="qres-parent-watch", daemon=True).start()


def _exit_with_parent() -> None:
    """End this worker once the process that started it is gone: killed outright (kill -9),
    it never shuts its pool down, and the worker would wait for work for ever (and so would
    multiprocessing's resource tracker, which waits for every worker)."""
    parent = multiprocessing.parent_process()
    parent_pid = parent.pid if parent is not None else os.getppid()
    if parent is not None:  # its sentinel is a pipe the parent holds open while it lives
        multiprocessing.connection.wait([parent.sentinel])
    while os.getppid() == parent_pid:  # the pipe may also close with the parent alive
        time.sleep(1.0)
    os._exit(1)


def _prepare_in_worker(questions: list[Question]) -> _Batch:
    return _worker_preparer(questions)


def _worker_stopped(err: BrokenProcessPool) -> ChildProcessError:
    return ChildProcessError(
        f"a worker process preparing the batches stopped ({err}): run the command "
        "again, or with --workers 0 to prepare them in this process"
    )


_DONE = object()


class _Stages:
    """Functions chained by bounded queues, one thread each; the last one's results are
    dropped. The first error stops the work (later batches are drained, not processed) and
    is raised by :meth:`put` or :meth:`finish` in the calling thread."""

    def __init__(self, functions: list[Callable]):
        self._queues = [queue.Queue(QUEUE_DEPTH) for _ in functions]
        self._error: BaseException | None = None
        self._cut = 0  # the batches not yet at this stage are dropped
        # Waited for by these, not Thread.join: on Python 3.11 a join that Ctrl-C cuts short
        # marks the thread ended while it still runs, and every later join returns at once.
        self._ended = [threading.Event() for _ in functions]
        threads = [
            threading.Thread(
                target=self._run,
                args=(f, self._queues[i], self._queues[i + 1] if i + 1 < len(functions) else None),
                kwargs={"ended": self._ended[i], "stage": i},
                name=f"qres-index-{f.__name__}",
                daemon=True,
            )
            for i, f in enumerate(functions)
        ]
        self._closed = False
        for thread in threads:
            thread.start()

    def _run(self, function, inbox: queue.Queue, outbox: queue.Queue | None, ended, stage) -> None:
        try:
            while (item := inbox.get()) is not _DONE:
                if self.dropping(stage):
                    continue
                try:
                    result = function(item)
                except _Dropped:
                    continue
                except BaseException as err:  # handed to the calling thread
                    self._error = err
                    continue
                if outbox is not None:
                    outbox.put(result)
            if outbox is not None:
                outbox.put(_DONE)
        finally:
            ended.set()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def put(self, item) -> None:
        self._raise()
        if self._closed:
            raise RuntimeError("indexing stages already finished")  # never drop a batch
        self._queues[0].put(item)  # blocks while the pipeline is full

    def finish(self) -> None:
        """Wait for every batch put so far to go through, then raise the first error. Called
        again after a Ctrl-C cut it short, it waits again (the process must not end while a
        stage runs: onnxruntime aborts it)."""
        self._close()
        for ended in self._ended:
            ended.wait()
        self._raise()

    def dropping(self, stage: int) -> bool:
        """Whether the batch ``stage`` is at work on is to be dropped: the function may then
        raise :class:`_Dropped` to end its work on it early."""
        return stage < self._cut or self._error is not None

    def cut(self, keep_from: int) -> None:
        """Drop the batches not yet at stage ``keep_from`` (one a stage is at work on goes to
        the next, and is dropped there if that is before ``keep_from``), put nothing more,
        and wait for the others as :meth:`finish` does."""
        self._cut = keep_from
        self.finish()

    def stop(self) -> None:
        """Like :meth:`finish` after an error: the batches not yet through are dropped, the
        threads end (each after its current run), nothing is raised; Ctrl-C does not cut it
        short (the process must not end while a stage runs)."""
        self._error = self._error or _Stopped()
        _uncut(self._close)
        for ended in self._ended:
            _uncut(ended.wait)

    def _close(self) -> None:
        if not self._closed:
            self._queues[0].put(_DONE)  # waits for room: a Ctrl-C here leaves it unsent
            self._closed = True


def _uncut(wait: Callable[[], object]) -> None:
    """``wait()``, called again each time a Ctrl-C cuts it short."""
    while True:
        with contextlib.suppress(KeyboardInterrupt):
            wait()
            return


class _Dropped(Exception):
    """Raised by a stage's function to drop the batch it is at work on
    (:meth:`_Stages.dropping`)."""


class _Stopped(Exception):
    """Set as the error so the stages drain without processing after a failure elsewhere."""


def _changed(backend: Backend, questions: list[Question], report: IndexReport) -> list:
    """The questions not already stored exactly so (title, body, tags and, where the index
    stores them, extras)."""
    stored = backend.fetch([q.id for q in questions])
    extras = backend.stores_extras
    changed = [q for q in questions if _shown(stored.get(q.id), extras) != _shown(q, extras)]
    report.unchanged += len(questions) - len(changed)
    return changed


def _shown(q: Question | None, extras: bool):
    if q is None:
        return None
    return (q.title, q.body, tuple(q.tags), dict(q.extras) if extras else None)


def _encoders(encoder) -> list:
    if encoder is None:
        return []
    return list(encoder) if isinstance(encoder, list | tuple) else [encoder]


def _model_record(encoder) -> dict:
    return {
        "model_fingerprint": encoder.fingerprint,
        "vector_dim": encoder.dim,
        "model_dir": str(Path(encoder.model_dir).resolve()),
    }


def _record_models(backend: Backend, encoders: list) -> list:
    """Refuse to mix vectors of other models into an index; record the models otherwise.
    Returns the encoders of models to add to the questions the index holds.

    The writer's lock comes first: a second writer is turned away before it changes
    anything, and the check sees what the last writer recorded."""
    if len(encoders) > 1 and not getattr(backend, "several_models", False):
        raise BackendError(
            f"several --model need a backend that stores a vector per model: the "
            f"{backend.name} backend stores one model's vectors per index"
        )
    fingerprints = [e.fingerprint for e in encoders]
    if len(set(fingerprints)) < len(fingerprints):
        raise BackendError(
            "the same model is given twice: pass each --model once, and none that "
            "--model-set already holds"
        )
    backend.acquire_write_lock()
    meta = backend.metadata()
    held = index_models(meta)
    count = backend.count()
    if held and count > 0:
        given = set(fingerprints)
        missing = [m for m in held if m["model_fingerprint"] not in given]
        if missing:
            raise BackendError(
                f"this index holds vectors of {_named(missing)}, not given: {_pass_all(held)}, "
                "or re-index everything with `qres index CORPUS --rebuild` and the --model-set or "
                "--model to use"
            )
        for m, e in ((m, e) for m in held for e in encoders):
            if m["model_fingerprint"] == e.fingerprint and m["vector_dim"] != e.dim:
                raise BackendError(
                    f"model {e.fingerprint[:12]} gives {e.dim} dimensions but the index holds "
                    f"{m['vector_dim']} for it: re-index with `qres index --rebuild`"
                )
        return [e for e in encoders if e.fingerprint not in {m["model_fingerprint"] for m in held}]
    if encoders and count > 0:  # recorded, its questions would have no vectors
        given = _named([_model_record(e) for e in encoders])
        raise BackendError(
            f"this index holds {count:,} questions without vectors: to store those of "
            f"{given}, index its corpus again with --rebuild (built aside: searches see the "
            "index as it is until it is done)"
        )
    first, *more = encoders
    values = _model_record(first)
    if more or meta.get("more_models"):
        values["more_models"] = [_model_record(e) for e in more]
    if more:
        values["format"] = 3  # several vector files: an older qres must not open it
    backend.set_metadata(values)
    return []


def add_models(backend: Backend, encoders: list, on_batch: Callable[[int], None] | None = None):
    """Add the vectors of ``encoders``' models to every question of the index that has
    vectors, computing only theirs (the vectors held are kept); crash-safe: an interrupted
    add leaves the index holding the models it held (see the backends' ``add_models``).
    Returns the number of questions encoded."""
    by_fingerprint = {e.fingerprint: e for e in encoders}

    def encode(questions: list[Question]) -> dict:
        vectors = {fp: e.encode_questions(questions) for fp, e in by_fingerprint.items()}
        if on_batch:
            on_batch(len(questions))
        return vectors

    return backend.add_models([_model_record(e) for e in encoders], encode)


def search_encoder(model_dir: str | Path, device: str | None = None):
    """The encoder of a model whose score search can compute (not a BOW-CNN's); ``device``
    as for :meth:`qres.encoders.runtime.Runtime.from_env`."""
    from qres.encoders.manifest import open_model
    from qres.encoders.runtime import Encoder, Runtime

    model = open_model(model_dir)
    model.require_search_scorer()
    return Encoder.from_model(model, runtime=Runtime.from_env(device))


def check_keeps_vectors(backend: Backend, encoder) -> None:
    """Refuse to add questions without vectors to an index whose questions have them."""
    held = index_models(backend.metadata())
    if not _encoders(encoder) and held and backend.count() > 0:
        raise BackendError(
            f"this index stores dense vectors of {_named(held)}: {_pass_all(held)} "
            "(or --rebuild --no-vectors)"
        )


def index_model_dirs(backend: Backend) -> list[str]:
    """The directories of the models the index holds, in its order (as recorded)."""
    return [m.get("model_dir") or "" for m in index_models(backend.metadata())]


def _named(models: list[dict]) -> str:
    """'model 910bce9c3965 (/dir/minilm)', or '2 models: ..., ...'."""
    each = [
        f"{m['model_fingerprint'][:12]} ({m.get('model_dir') or 'directory unknown'})"
        for m in models
    ]
    return f"model {each[0]}" if len(each) == 1 else f"{len(each)} models: {', '.join(each)}"


def _pass_all(held: list[dict]) -> str:
    """How to name every model of the index on the command line."""
    name = model_set_of([m["model_fingerprint"] for m in held])
    if name:
        return f"pass --model-set {name} (the index holds exactly the {name} model set)"
    flags = " ".join(f"--model {m.get('model_dir') or 'DIR'}" for m in held)
    return f"pass every model of the index: {flags}"
