"""Wall time of `qres search` as a user runs it (a fresh process each time), as JSON.

    python benchmarks/cli_startup.py [--runs 10]

Indexes the demo corpus with the default model into a temporary QRES_HOME, then runs
`qres search` (bm25 and hybrid) and a bare `import qres.cli` ``--runs`` times each in new
interpreters and reports the median and the fastest wall time. Target: hybrid ≤ 0.6 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "qres" / "data" / "demo" / "questions.tsv"
MODEL = REPO / "qres" / "models" / "default"
QRES = [sys.executable, "-c", "from qres.cli import main; main()"]  # the console script


def wall(command: list[str], env: dict, runs: int) -> dict:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="qres-startup-"))
    env = {**os.environ, "QRES_HOME": str(home), "QRES_BACKEND": "embedded"}
    subprocess.run([*QRES, "index", str(DEMO), "--model", str(MODEL)], env=env, check=True)
    query = "boot ubuntu from a usb stick"
    result = {
        "benchmark": "cli_startup",
        "machine": machine(),
        "corpus": {"questions": 330, "kind": "qres/data/demo"},
        "runs": args.runs,
        "python_start": wall([sys.executable, "-c", "pass"], env, args.runs),
        "import_qres_cli": wall([sys.executable, "-c", "import qres.cli"], env, args.runs),
        "search_bm25": wall([*QRES, "search", query, "--mode", "bm25"], env, args.runs),
        "search_hybrid": wall([*QRES, "search", query, "--mode", "hybrid"], env, args.runs),
        "target_search_s": 0.6,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
