"""Ctrl-C, once or twice, at random points of ``qres index --rebuild``, as a terminal sends it
(to the whole process group, the workers included); each run must end with exit 130 and
nothing left running, as JSON.

    python benchmarks/ctrl_c_stress.py --corpus Posts.xml --index-dir DIR
        [--model-set fast | --model DIR] [--runs 20] [--presses 2] [--from 1.5] [--to 21]
        [--max-gap 0.6] [--seed 0] [--out FILE]

``--index-dir``: an index of ``--corpus`` built first if missing (a rebuild replaces it, and
each interrupted rebuild must leave it as it was). Each run starts the rebuild, presses Ctrl-C
after a random time in [``--from``, ``--to``] s and, with ``--presses 2``, again 0.01 s to
``--max-gap`` s later (only while it runs), then waits up to 30 s. Each run's presses that
found it running, its exit status (-6: onnxruntime aborted as the process ended while it ran;
"hung": still running after 30 s, killed), seconds from the last press to the end, and
whether a process of its group outlived it are recorded. qres runs in this interpreter:
``PYTHONPATH=OTHER_CHECKOUT`` runs another code with the same packages.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

QRES = "import sys; from qres.cli import main; sys.argv[0] = 'qres'; main()"


def one_run(args, rng: random.Random) -> dict:
    rebuild = [sys.executable, "-c", QRES, "index", str(args.corpus), "--rebuild"]
    rebuild += ["--index-dir", str(args.index_dir), *models(args)]
    after = rng.uniform(args.start, args.end)
    gaps = [rng.uniform(0.01, args.max_gap) for _ in range(args.presses - 1)]
    started = subprocess.Popen(
        rebuild,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as a terminal's foreground job
        # with Ctrl-C as a terminal gives it: a benchmark started with `&` passes it on ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(after)
    presses = 0  # those that found it running
    for gap in [0.0, *gaps]:
        time.sleep(gap)
        if started.poll() is not None:
            break
        os.killpg(started.pid, signal.SIGINT)
        presses += 1
    pressed = time.monotonic()
    try:
        started.wait(timeout=30)
        status = started.returncode
    except subprocess.TimeoutExpired:
        status = "hung"
        os.killpg(started.pid, signal.SIGKILL)
        started.wait()
    ended = time.monotonic() - pressed
    said = started.stderr.read().strip().splitlines()
    time.sleep(1.0)  # the group's other processes: gone by now, or outliving it
    left = subprocess.run(["pgrep", "-g", str(started.pid)], capture_output=True, text=True)
    outlived = [int(pid) for pid in left.stdout.split() if not _zombie(int(pid))]
    for pid in outlived:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return {
        "after_s": round(after, 2),
        "gaps_s": [round(g, 2) for g in gaps],
        "presses_while_running": presses,
        "status": status,
        "ended_after_last_press_s": round(ended, 2),
        "outlived": len(outlived),
        "last_line": said[-1] if said else "",
    }


def models(args) -> list[str]:
    return ["--model", str(args.model)] if args.model else ["--model-set", args.model_set]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True  # gone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--index-dir", type=Path, required=True)
    parser.add_argument("--model-set", default="fast")
    parser.add_argument("--model", type=Path, help="a model directory instead of a model set")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--presses", type=int, choices=[1, 2], default=2)
    parser.add_argument("--from", dest="start", type=float, default=1.5)
    parser.add_argument("--to", dest="end", type=float, default=21.0)
    parser.add_argument("--max-gap", type=float, default=0.6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not (args.index_dir / "meta.json").exists():
        build = [sys.executable, "-c", QRES, "index", str(args.corpus)]
        build += ["--index-dir", str(args.index_dir), *models(args)]
        subprocess.run(build, check=True, stdout=subprocess.DEVNULL)
    rng = random.Random(args.seed)
    runs = []
    for i in range(args.runs):
        runs.append(one_run(args, rng))
        print(f"run {i + 1}/{args.runs}: {json.dumps(runs[-1])}", file=sys.stderr, flush=True)
    statuses: dict[str, int] = {}
    for run in runs:
        statuses[str(run["status"])] = statuses.get(str(run["status"]), 0) + 1
    report = {
        "command": " ".join(sys.argv),
        "code": os.environ.get("PYTHONPATH") or str(Path(__file__).resolve().parents[1]),
        "load_1min": round(os.getloadavg()[0], 2),
        "statuses": statuses,
        "runs_pressed_twice_while_running": sum(r["presses_while_running"] == 2 for r in runs),
        "slowest_end_s": max(r["ended_after_last_press_s"] for r in runs),
        "outlived": sum(r["outlived"] for r in runs),
        "runs": runs,
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text if not args.out else json.dumps({k: report[k] for k in report if k != "runs"}))


if __name__ == "__main__":
    main()
