"""`qres index` of a whole forum, each model choice timed as a user runs it, as JSON.

    python benchmarks/forum_indexing.py --corpus ../shared/data/stackexchange-travel/Posts.xml \\
        [--choice bm25] [--choice gru] [--choice minilm] [--choice fast] [--runs 3]

Each run is the command a forum operator types, in a fresh index directory, start-up
included: ``qres index CORPUS`` plus ``--model qres/models/default`` (gru), ``--model-set
minilm``, ``--model-set fast`` or ``--model-set default`` (bm25: no model). Choices run in
turn, run by run (A B A B ...), so drifts of the machine's load hit all alike; the figures
are the median over runs of wall seconds, questions per second, CPU seconds (user + system of
the command and its children) and peak RSS (the largest process, as the operating system
accounted it). The ratios divide each choice's median wall time by the first choice's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.backends.embedded import EmbeddedBackend  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHOICES = {
    "bm25": [],
    "gru": ["--model", str(ROOT / "qres" / "models" / "default")],
    "minilm": ["--model-set", "minilm"],
    "fast": ["--model-set", "fast"],
    "default": ["--model-set", "default"],
}


def run_once(corpus: Path, choice: str, workdir: Path) -> dict:
    index_dir = workdir / f"index-{choice}"
    shutil.rmtree(index_dir, ignore_errors=True)
    qres = Path(sys.executable).parent / "qres"  # the console script, as a user runs it
    command = [str(qres), "--index-dir", str(index_dir), "index", str(corpus), *CHOICES[choice]]
    with tempfile.TemporaryFile() as stderr:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            stderr.seek(0)
            error = stderr.read().decode(errors="replace")[-500:]
            raise SystemExit(f"{' '.join(command)} failed ({child.returncode}): {error}")
    count = _count(index_dir)
    shutil.rmtree(index_dir, ignore_errors=True)
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,  # Linux: kilobytes
        "questions": count,
    }


def _count(index_dir: Path) -> int:
    with EmbeddedBackend(index_dir) as backend:
        return backend.count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="any file qres index reads")
    parser.add_argument("--choice", action="append", choices=list(CHOICES))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    choices = args.choice or ["gru", "fast"]
    if not args.corpus.is_file():
        raise SystemExit(f"{args.corpus}: no such file")
    workdir = Path(tempfile.mkdtemp(prefix="qres-forum-indexing-"))
    load_at_start = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {c: [] for c in choices}
    try:
        for _ in range(args.runs):
            for choice in choices:
                runs[choice].append(run_once(args.corpus, choice, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    medians = {}
    for choice, done in runs.items():
        wall = float(np.median([r["wall_s"] for r in done]))
        questions = done[0]["questions"]
        medians[choice] = {
            "questions": questions,
            "wall_s": round(wall, 2),
            "questions_per_s": round(questions / wall, 1),
            "cpu_s": round(float(np.median([r["cpu_s"] for r in done])), 2),
            "peak_rss_mb": round(float(np.median([r["peak_rss_mb"] for r in done])), 1),
            "wall_s_each_run": [round(r["wall_s"], 2) for r in done],
            "peak_rss_mb_each_run": [round(r["peak_rss_mb"], 1) for r in done],
        }
    first = medians[choices[0]]["wall_s"]
    print(
        json.dumps(
            {
                "benchmark": "forum_indexing",
                "corpus": str(args.corpus),
                "runs": args.runs,
                "choices": medians,
                "wall_over_first": {c: round(m["wall_s"] / first, 2) for c, m in medians.items()},
                "machine": {**machine(), "load_average_1m_at_start": round(load_at_start, 2)},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
