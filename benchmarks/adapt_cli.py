"""`qres adapt`, then `qres index` and `qres evaluate` with its set, through the CLI, as JSON.

    python benchmarks/adapt_cli.py --home /tmp/qres-adapt-home \\
        [--forum ../shared/data/stackexchange-travel] [--name travel] [--out FILE] [--adapt-only]

What a forum operator runs, each command a process of its own under ``/usr/bin/time -v``, in
``--home`` as ``$QRES_HOME`` (give a fresh one to time the whole command: a run already
there is resumed, which is quick): ``qres adapt FORUM --name NAME`` (building the ``minilm``
set it compares with when the home lacks it), ``qres index FORUM/Posts.xml --model-set
NAME``, then ``qres --json evaluate --dataset stackexchange --split test --model-set NAME
--ranker hybrid`` with whole questions and with titles, the forum's duplicate links followed
(``adapt``'s own report is the text alone). Records wall time, user and system CPU and peak
RSS of each command, the report ``adapt`` wrote, the evaluation's nDCG@10 and R@100.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TIME_FIELDS = {
    "Elapsed (wall clock) time (h:mm:ss or m:ss)": "wall",
    "User time (seconds)": "user_seconds",
    "System time (seconds)": "system_seconds",
    "Maximum resident set size (kbytes)": "peak_rss_kb",
}


def timed(command: list[str], env: dict) -> tuple[dict, str, str]:
    """Run ``command`` under ``/usr/bin/time -v``; its measures, its stdout and its stderr."""
    started = time.monotonic()
    done = subprocess.run(
        ["/usr/bin/time", "-v", *command], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    measured = {"command": " ".join(command), "seconds": round(time.monotonic() - started, 1)}
    for line in done.stderr.splitlines():
        key, _, value = line.strip().partition(": ")
        if key in TIME_FIELDS:
            measured[TIME_FIELDS[key]] = value
    measured["peak_rss_gb"] = round(int(measured.pop("peak_rss_kb")) / 1e6, 2)
    print(json.dumps(measured), file=sys.stderr, flush=True)  # kept should a later step fail
    return measured, done.stdout, done.stderr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="$QRES_HOME for the run")
    parser.add_argument(
        "--forum", type=Path, default=ROOT.parent / "shared/data/stackexchange-travel"
    )
    parser.add_argument("--name", default="travel")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--adapt-only", action="store_true", help="time `qres adapt` alone (no index, evaluate)"
    )
    args = parser.parse_args(argv)
    qres = str(Path(sys.executable).with_name("qres"))
    env = {**os.environ, "QRES_HOME": str(args.home), "HF_HUB_OFFLINE": "1"}
    result = {"benchmark": __doc__.splitlines()[0], "machine": machine(), "commands": {}}
    result["date"] = time.strftime("%Y-%m-%d")

    adapt, printed, _ = timed([qres, "adapt", str(args.forum), "--name", args.name], env)
    result["commands"]["adapt"] = adapt
    result["adapt_printed"] = printed.strip().splitlines()
    made = args.home / "model-sets" / args.name
    result["adapt_report"] = json.loads((made / "report.json").read_text())
    result["fine_tuning"] = json.loads((made / "set.json").read_text()).get("fine_tuning")
    if args.adapt_only:
        return _written(result, args.out)

    index_dir = args.home / f"index-{args.name}"
    posts = str(args.forum / "Posts.xml")
    indexing, _, said = timed(
        [qres, "index", posts, "--model-set", args.name, "--index-dir", str(index_dir)], env
    )
    result["commands"]["index"] = indexing
    counted = re.search(r"indexed ([\d,]+) questions", said)
    if counted:
        questions = int(counted.group(1).replace(",", ""))
        indexing["questions"] = questions
        indexing["questions_per_second"] = round(questions / indexing["seconds"], 1)

    result["links_followed_test_split"] = {}
    for form in ("question", "title"):
        command = [qres, "--json", "evaluate", "--dataset", "stackexchange", "--split", "test"]
        command += ["--data-dir", str(args.forum), "--model-set", args.name]
        command += ["--ranker", "hybrid", "--query", form]
        measured, printed, _ = timed(command, env)
        result["commands"][f"evaluate_{form}"] = measured
        result["links_followed_test_split"][form] = json.loads(printed)[0]["metrics"]
    return _written(result, args.out)


def _written(result: dict, out: Path | None) -> int:
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
