"""kill -9 during `qres index --rebuild`, `qres compact` and the automatic compaction of
`qres index`: the killed job's work directory (INDEX.rebuild, a near-full copy of the index)
is named by `qres info`, removed by the next write with one line saying so, and the index
and its vectors stay exact throughout.

Each job runs the real command in a subprocess and SIGKILLs itself at a seeded point inside
the copy into the work directory (the tiny ONNX model of tests/safety_helpers.py). A Ctrl-C or
SIGTERM landing between the two renames of the swap (issue 34) finishes the swap: the index
holds every question, the compacted or rebuilt copy is in place, and the next writer keeps it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from qres.backends.embedded import EmbeddedBackend
from qres.backends.embedded.directory import check_replaceable
from qres.corpus.readers import Question
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

N = 600
# What qres index says after Ctrl-C: while it writes what is encoded, and last (what this
# run committed; what the index holds, once it is open); before the command runs, what every
# command says.
STOPPING = r"stopping: writing what is encoded first \(Ctrl-C again to drop it\)"
COMMITTED = "everything committed before this point is kept"
KEPT = (
    r"interrupted: this run committed (no questions|[\d,]+ questions?, kept in the index)"
    r"( \((the index|it) holds [\d,]+\))?; the same command again indexes the rest"
)

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


# Runs `qres ARGS...` and sends itself SIGNAL right after rename WHICH of the swap (1: NAME →
# NAME.old, 2: NAME.rebuild → NAME), as a Ctrl-C or a `kill` could land there.
SIGNAL_AT_RENAME = """
import os, signal, sys
from qres.cli import main

# Ctrl-C as a terminal delivers it: a test worker may have been left ignoring SIGINT, which a
# child inherits (Python then installs no KeyboardInterrupt handler)
signal.signal(signal.SIGINT, signal.default_int_handler)
signum, which = getattr(signal, sys.argv[1]), int(sys.argv[2])
real = os.replace

def replace(src, dst):
    real(src, dst)
    if (which == 1 and str(dst).endswith(".old")) or (which == 2 and str(src).endswith(".rebuild")):
        os.kill(os.getpid(), signum)

os.replace = replace
sys.argv = ["qres", *sys.argv[3:]]
main()
"""
EXIT_STATUS = {"SIGTERM": 143, "SIGINT": 130}


@pytest.fixture(scope="module")
def indexed(world, tmp_path_factory):
    """An index of the corpus, indexed twice (N dead vector rows), copied by each test."""
    index_dir = tmp_path_factory.mktemp("indexed") / "ix"
    for _ in range(2):
        assert qres(index_dir, "index", world["corpus"], "--model", world["model"]).returncode == 0
    return index_dir


def signalled(signame, which, index_dir, *args):
    proc = python(SIGNAL_AT_RENAME, signame, which, "--index-dir", index_dir, *args, timeout=180)
    assert proc.returncode == EXIT_STATUS[signame], proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("interrupted: "), proc.stderr
    return proc


def assert_swapped_and_kept(index_dir, world):
    """Nothing left beside the index, which holds every question with its vector, has no
    dead rows (the new copy is the one in place), and takes the next write."""
    assert sorted(p.name for p in index_dir.parent.iterdir()) == [index_dir.name]
    assert_exact(index_dir, world)
    with EmbeddedBackend(index_dir) as b:
        assert b.storage()["dead_vector_rows"] == 0
        b.upsert([Question("next", "the next writer", "keeps every question")])
        b.commit()
        assert b.count() == N + 1


@pytest.mark.parametrize("which", [1, 2])
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_signal_at_either_rename_of_compact_finishes_the_swap(
    world, indexed, tmp_path, signame, which
):
    index_dir = tmp_path / "ix"
    shutil.copytree(indexed, index_dir)
    signalled(signame, which, index_dir, "compact")
    assert_swapped_and_kept(index_dir, world)


def test_sigterm_in_the_swap_of_a_rebuild_keeps_the_rebuilt_index_and_says_so(
    world, indexed, tmp_path
):
    index_dir = tmp_path / "ix"
    shutil.copytree(indexed, index_dir)
    args = ("index", world["corpus"], "--model", world["model"], "--rebuild")
    proc = signalled("SIGTERM", 1, index_dir, *args)
    assert "the index is the rebuilt one" in proc.stderr, proc.stderr
    assert_swapped_and_kept(index_dir, world)


def test_ctrl_c_in_the_swap_of_automatic_compaction_finishes_it(world, indexed, tmp_path):
    index_dir = tmp_path / "ix"
    shutil.copytree(indexed, index_dir)
    again = (world["corpus"], "--model", world["model"], "--rewrite")
    assert qres(index_dir, "index", *again).returncode == 0  # N live, 2N dead: compacts next
    signalled("SIGINT", 1, index_dir, "index", *again)
    assert_swapped_and_kept(index_dir, world)


# `qres index --workers 2` that SIGKILLs itself once its two worker processes are up (each
# batch's write slowed so the run is still going), after writing their pids and the
# multiprocessing resource tracker's to PIDS_FILE.
KILLED_WITH_WORKERS = """
import json, multiprocessing, os, signal, sys, threading, time
from multiprocessing import resource_tracker
import qres.backends.embedded as embedded
from qres.cli import main

pids_file, args = sys.argv[1], sys.argv[2:]
real_upsert = embedded.EmbeddedBackend.upsert

def slow_upsert(*a, **kw):
    time.sleep(0.1)
    return real_upsert(*a, **kw)

def kill_once_workers_run():
    while len(multiprocessing.active_children()) < 2:
        time.sleep(0.05)
    pids = [p.pid for p in multiprocessing.active_children()]
    pids.append(resource_tracker._resource_tracker._pid)
    with open(pids_file, "w") as f:
        json.dump([p for p in pids if p], f)
    os.kill(os.getpid(), signal.SIGKILL)

embedded.EmbeddedBackend.upsert = slow_upsert
threading.Thread(target=kill_once_workers_run, daemon=True).start()
sys.argv = ["qres", *args]
main()
"""


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has exited
    except FileNotFoundError:
        return True


def test_kill_9_of_index_with_workers_leaves_no_process_behind(world, tmp_path):
    pids_file, log = tmp_path / "pids.json", tmp_path / "stderr.txt"
    args = (
        "--index-dir", tmp_path / "ix", "index", world["corpus"], "--model", world["model"],
        "--workers", "2", "--batch-size", "20",
    )  # fmt: skip
    with open(log, "w") as stderr:  # a file, not a pipe: the leftovers would hold a pipe open
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_WITH_WORKERS, pids_file, *map(str, args)],
            env=CHILD_ENV,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        assert proc.wait(timeout=180) == -9, log.read_text()
    pids = json.loads(pids_file.read_text())
    assert len(pids) == 3  # two workers and the resource tracker
    deadline = time.monotonic() + 20
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in pids if not gone(pid)]
    for pid in left:  # leave nothing running after the test, whatever it found
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{len(left)} processes outlived the killed qres index"


def test_ctrl_c_from_the_terminal_while_workers_start_ends_the_run(tmp_path):
    """The terminal's Ctrl-C reaches every process of its group: a worker it killed while it
    started left `qres index` writing the worker's start-up data to it for ever (a hang that a
    second Ctrl-C did not end), and one it stopped mid-batch printed a traceback."""
    from qres.encoders.model_set import SHIPPED_GRU  # a vocabulary of megabytes to hand over

    questions = make_corpus(4000)
    corpus = write_tsv(tmp_path / "c.tsv", questions)
    for delay in (0.3, 0.5, 0.7, 0.9, 1.2, 1.6):
        index_dir = tmp_path / f"ix-{delay}"
        args = ("--index-dir", index_dir, "index", corpus, "--model", SHIPPED_GRU)
        args += ("--workers", "1", "--batch-size", "64")
        after = partial(_sleeping, delay)
        code, said = _ctrl_c(args, CHILD_ENV, tmp_path / "stderr.txt", after)
        assert code in (0, 130), said
        if code == 130 and not said:  # pressed while the command line loaded (a loaded machine)
            assert not index_dir.exists()
        elif code == 130:
            # (the first: pressed while the command's own modules loaded)
            last = said.strip().splitlines()[-1]
            assert last == f"interrupted: {COMMITTED}" or re.fullmatch(KEPT, last), said
            assert "_process_worker" not in said  # no worker stopped mid-batch
        if (index_dir / "meta.json").exists():
            with EmbeddedBackend(index_dir) as b:
                assert_committed_prefix(b, questions)
        elif index_dir.exists():  # stopped while the index was made: the next run makes it
            check_replaceable(index_dir)


SLOW_WORKER_START = """
import os, sys, time
from pathlib import Path

if "--multiprocessing-fork" in sys.argv:  # a spawned worker, before Python imports its work
    Path(os.environ["QRES_TEST_STARTING"]).touch()
    time.sleep(2)
"""


def _slow_worker_start(tmp_path) -> tuple[dict, Path]:
    """An environment whose spawned workers wait 2 s before Python imports their work (as on a
    loaded machine), and the file each touches then."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_WORKER_START)
    starting = tmp_path / "a-worker-is-starting"
    env = {
        **CHILD_ENV,
        "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{CHILD_ENV['PYTHONPATH']}",
        "QRES_TEST_STARTING": str(starting),
    }
    return env, starting


def _in_its_own_group(args, env, stderr) -> subprocess.Popen:
    """qres with ``args``, started in a process group of its own, which a test signals as a
    terminal signals its foreground group."""
    start = "import sys; from qres.cli import main; sys.argv = ['qres'] + sys.argv[1:]; main()"
    return subprocess.Popen(
        [sys.executable, "-c", start, *map(str, args)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
    )


def _ctrl_c(
    args, env, stderr_file, when: Callable[[subprocess.Popen], None], signum=signal.SIGINT
) -> tuple[int, str]:
    """Run qres with ``args`` in its own process group and press Ctrl-C as a terminal does
    (or send ``signum`` to the group) once ``when(process)`` returns; its exit code and what
    it said."""
    with open(stderr_file, "w") as stderr:
        proc = _in_its_own_group(args, env, stderr)
        when(proc)
        os.killpg(proc.pid, signum)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"qres did not end after {signal.Signals(signum).name}")
    return code, Path(stderr_file).read_text()


def _sleeping(seconds: float, _proc: subprocess.Popen) -> None:
    time.sleep(seconds)


def _once_a_worker_starts(starting: Path) -> Callable[[subprocess.Popen], None]:
    def wait(proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + 60
        while not starting.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert starting.exists(), "no worker started"

    return wait


def test_ctrl_c_while_a_worker_starts_python_prints_no_traceback(tmp_path):
    """Python in a worker takes a moment to start, and the terminal's Ctrl-C reached it there
    (before it could ignore Ctrl-C): it printed its own traceback above qres's line."""
    questions = make_corpus(3000)
    corpus = write_tsv(tmp_path / "c.tsv", questions)
    env, starting = _slow_worker_start(tmp_path)
    args = ("--index-dir", tmp_path / "ix", "index", corpus, "--workers", "1", "--batch-size", "64")
    code, said = _ctrl_c(args, env, tmp_path / "stderr.txt", _once_a_worker_starts(starting))
    assert code == 130, said
    *before, last = said.strip().splitlines()
    assert re.fullmatch(KEPT, last), said
    assert len(before) <= 1 and all(re.fullmatch(STOPPING, line) for line in before), said
    with EmbeddedBackend(tmp_path / "ix") as b:
        assert_committed_prefix(b, questions)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_sigterm_or_sighup_to_the_whole_group_stops_the_run_not_its_workers(tmp_path, stop):
    """A service manager stops a job by SIGTERM to each of its processes, and a closed terminal
    sends its group SIGHUP. SIGTERM killed a worker mid-answer, and the run then waited for
    ever on its pool (1 of 174 runs); SIGHUP ended qres at once, without a word, and left the
    workers' start-up file in TMPDIR."""
    questions = make_corpus(3000)
    corpus = write_tsv(tmp_path / "c.tsv", questions)
    env, starting = _slow_worker_start(tmp_path)
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    args = ("--index-dir", tmp_path / "ix", "index", corpus, "--workers", "1", "--batch-size", "64")
    code, said = _ctrl_c(args, env, tmp_path / "stderr.txt", _once_a_worker_starts(starting), stop)
    assert code == 128 + stop, said
    *before, last = said.strip().splitlines()
    assert re.fullmatch(KEPT, last), said
    assert len(before) <= 1 and all(re.fullmatch(STOPPING, line) for line in before), said
    assert not list((tmp_path / "tmp").glob("qres-index-*")), "the workers' file was left"
    with EmbeddedBackend(tmp_path / "ix") as b:
        assert_committed_prefix(b, questions)


def test_workers_are_born_with_sigterm_and_sighup_held_as_ctrl_c_is():
    import multiprocessing

    from qres.workers import ctrl_c_held

    with ctrl_c_held():
        pool = multiprocessing.get_context("spawn").Pool(1)
    try:
        blocked = pool.apply(signal.pthread_sigmask, (signal.SIG_BLOCK, []))
    finally:  # ended as qres ends its workers: the pool's terminate() sends the SIGTERM they hold
        pool.close()
        pool.join()
    assert {signal.SIGINT, signal.SIGTERM, signal.SIGHUP} <= set(blocked)


def test_ctrl_c_while_serve_starts_its_workers_prints_no_traceback(tmp_path):
    """The same for ``qres serve --workers 2``, whose workers uvicorn starts."""
    from tests.serving import build_demo_index, free_port

    index = build_demo_index(tmp_path / "index")
    env, starting = _slow_worker_start(tmp_path)
    args = ("--index-dir", index, "serve", "--workers", "2", "--port", free_port())
    code, said = _ctrl_c(args, env, tmp_path / "stderr.txt", _once_a_worker_starts(starting))
    assert code == 0, said
    assert "Traceback" not in said and "KeyboardInterrupt" not in said, said
    assert "Received SIGINT, exiting." in said, said


def test_a_second_ctrl_c_ends_serve_while_a_worker_waits_for_a_request(tmp_path):
    """The first Ctrl-C lets each worker finish the requests it holds; the second ends one
    that waits for a client that never finishes its request. Workers born with Ctrl-C held
    kept it held, and only SIGKILL ended such a server."""
    import socket

    import httpx

    from tests.serving import build_demo_index, free_port

    index, port = build_demo_index(tmp_path / "index"), free_port()
    args = ("--index-dir", index, "serve", "--workers", "2", "--port", port)
    with open(tmp_path / "stderr.txt", "w") as stderr:
        proc = _in_its_own_group(args, CHILD_ENV, stderr)
    client = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        time.sleep(0.5)  # a worker holds the request, waiting for the rest of its body
        os.killpg(proc.pid, signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)  # the first Ctrl-C waits for the request
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0, (tmp_path / "stderr.txt").read_text()
    finally:
        if client is not None:
            client.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_stages_wait_again_after_ctrl_c_cut_their_wait_short():
    """On Python 3.11 a thread's join that Ctrl-C cuts short marks the thread ended while it
    still runs: the stages' second wait (after Ctrl-C, for the batches they hold) returned at
    once, and the process ended while onnxruntime ran in a stage, which aborted it."""
    import threading

    from qres.indexing.pipeline import _Stages

    release, done = threading.Event(), []

    def slow(item):
        release.wait()
        time.sleep(0.2)
        done.append(item)
        return item

    stages = _Stages([slow])
    for item in range(3):
        stages.put(item)
    main = threading.main_thread().ident
    threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT)).start()  # Ctrl-C
    watchdog = threading.Timer(60, release.set)  # a Ctrl-C that never came fails, not hangs
    watchdog.daemon = True
    watchdog.start()
    with pytest.raises(KeyboardInterrupt):
        stages.finish()
    watchdog.cancel()
    release.set()
    stages.finish()
    assert done == [0, 1, 2]


def test_a_ctrl_c_while_the_stages_stop_does_not_cut_their_wait_short():
    """Ctrl-C pressed twice: the second cut short the wait of the stages' stop (after the
    first stopped the run), and the process ended while onnxruntime ran in a stage, which
    aborted it ("terminate called without an active exception", exit status 134: 3 of 8
    double Ctrl-Cs during `qres index --rebuild --model-set fast` of the travel forum)."""
    import threading

    from qres.indexing.pipeline import _Stages

    running, pressed, done = threading.Event(), threading.Event(), []

    def slow(item):  # ends only once Ctrl-C was pressed again
        running.set()
        pressed.wait(60)
        time.sleep(0.2)
        done.append(item)

    stages = _Stages([slow])
    stages.put(0)
    assert running.wait(10)
    main = threading.main_thread().ident

    def press_again() -> None:  # once the stop has begun
        while stages._error is None:
            time.sleep(0.01)
        signal.pthread_kill(main, signal.SIGINT)
        pressed.set()

    presser = threading.Thread(target=press_again)
    presser.start()
    try:
        stages.stop()
    except KeyboardInterrupt:
        pytest.fail("a Ctrl-C cut the stages' stop short")
    finally:
        presser.join()
    assert done == [0]


def test_a_ctrl_c_while_the_workers_shut_down_does_not_cut_it_short(tmp_path):
    """A second Ctrl-C cut the pool's shutdown short: a worker then waited for the message
    to end for ever, and `qres index` waited for the worker as it exited (a hang after
    "interrupted: ...")."""
    import multiprocessing
    import multiprocessing.connection
    import threading
    from concurrent.futures import ProcessPoolExecutor

    from qres.indexing.pipeline import _shut_down

    started, pressed = tmp_path / "started", tmp_path / "pressed"
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    assert pool.submit(os.getpid).result(timeout=60) > 0  # its worker is up
    (worker,) = [p for p in multiprocessing.active_children() if p.pid in pool._processes]
    # the batch in hand as the run stops: it ends only once Ctrl-C was pressed again
    pool.submit(os.system, f"touch {started}; until [ -e {pressed} ]; do sleep 0.02; done")
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:  # in the worker's hands
        time.sleep(0.01)
    assert started.exists(), "the worker did not start the batch"
    main = threading.main_thread().ident

    def press_again() -> None:  # once the shutdown has begun
        while not pool._shutdown_thread:
            time.sleep(0.01)
        signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.2)
        pressed.touch()

    presser = threading.Thread(target=press_again)
    presser.start()
    try:
        _shut_down(pool)
    except KeyboardInterrupt:
        pytest.fail("a Ctrl-C cut the workers' shutdown short")
    finally:
        presser.join()
        pressed.touch()
    assert multiprocessing.connection.wait([worker.sentinel], timeout=0)  # it has ended


def test_ctrl_c_writes_the_batch_being_encoded_and_drops_those_not_yet_encoded():
    """The first Ctrl-C waited for every batch read to be encoded (45 s for the travel forum
    with the fast set); it now ends after the one in hand, which is written."""
    import threading

    from qres.indexing.pipeline import _Stages

    encoding, release, written = threading.Event(), threading.Event(), []

    def encode(item):
        encoding.set()
        release.wait()
        return item

    stages = _Stages([lambda item: item, encode, written.append])
    for item in range(6):
        stages.put(item)
    assert encoding.wait(10)  # the first batch is being encoded, the others wait for it
    threading.Timer(0.2, release.set).start()
    stages.cut(keep_from=2)
    assert written == [0]


def test_ctrl_c_drops_the_batch_being_encoded_at_the_end_of_its_current_run():
    """A transformer's batch of the CPU's size is 2,048 questions: finishing it took 17.5 s
    after Ctrl-C on the travel forum with the fast set."""
    import threading

    from qres.indexing.pipeline import _Dropped, _Stages

    runs, encoding, written = [], threading.Event(), []

    def encode(item):  # runs of 0.05 s, asking after each whether to go on
        for run in range(100):
            encoding.set()
            time.sleep(0.05)
            runs.append(run)
            if stages.dropping(1):
                raise _Dropped
        return item

    stages = _Stages([lambda item: item, encode, written.append])
    stages.put(0)
    assert encoding.wait(10)
    stages.cut(keep_from=2)
    assert written == [] and len(runs) < 100


WORKER_KILLED = """
import multiprocessing, os, signal, sys, threading, time
from qres.cli import main

def kill_a_worker():
    while not multiprocessing.active_children():
        time.sleep(0.01)
    os.kill(multiprocessing.active_children()[0].pid, signal.SIGKILL)

threading.Thread(target=kill_a_worker, daemon=True).start()
sys.argv = ["qres", *sys.argv[1:]]
main()
"""

# The pool learns of the death before the next batch is handed to it: its submit() raises.
WORKER_KILLED_BEFORE_A_HANDOVER = """
import multiprocessing, os, signal, sys, time
from concurrent.futures import ProcessPoolExecutor
from qres.cli import main

real_submit, submitted = ProcessPoolExecutor.submit, []

def submit(pool, *args):
    submitted.append(1)
    if len(submitted) == 2:
        os.kill(multiprocessing.active_children()[0].pid, signal.SIGKILL)
        while not pool._broken:
            time.sleep(0.01)
    return real_submit(pool, *args)

ProcessPoolExecutor.submit = submit
sys.argv = ["qres", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("script", [WORKER_KILLED, WORKER_KILLED_BEFORE_A_HANDOVER])
def test_a_worker_killed_by_the_system_ends_the_run_in_one_line(world, tmp_path, script):
    """A worker process killed outright (out of memory, say) gave a traceback, as it still did
    when the pool noticed the death before the next batch was handed over (1 run in 13)."""
    questions = make_corpus(3000)
    corpus = write_tsv(tmp_path / "c.tsv", questions)
    args = ("--index-dir", tmp_path / "ix", "index", corpus, "--model", world["model"])
    done = python(script, *args, "--workers", "1", "--batch-size", "20", timeout=120)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: a worker process preparing the batches stopped (")
    assert line.endswith("or with --workers 0 to prepare them in this process")
    with EmbeddedBackend(tmp_path / "ix") as b:
        assert_committed_prefix(b, questions)
