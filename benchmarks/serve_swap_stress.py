"""`qres serve` beside a writer that compacts the index again and again, as JSON: every
answer's status and every connection error, counted (a search overlapping a swap must
neither fail nor drop the connection).

    python benchmarks/serve_swap_stress.py --docs 5000 --index-dir /tmp/qres-swap \\
        [--clients 8] [--compactions 12] [--mode hybrid]

Builds (or reuses, when --index-dir already holds one) a synthetic corpus index
(benchmarks/synthetic.py) with the shipped model's vectors, starts `qres serve` on a
loopback port, runs closed-loop clients (GET /search and POST /search with a body, so both
the BM25 and the nearest-vector first stages run) and meanwhile `qres compact` in another
process, one compaction after another; the clients stop a second after the last one. The
server's log is searched for tracebacks. Clients, server and compactions share the machine.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402
from serve_load import ROOT, build_index, free_port, start_server  # noqa: E402
from synthetic import SyntheticForum  # noqa: E402

from qres.paths import repo_shared_data  # noqa: E402


def compact_repeatedly(index_dir: Path, times: int, done: list) -> None:
    """``qres compact`` ``times`` times in a row; each one's seconds and exit status."""
    command = [sys.executable, "-c", "from qres.cli import main; main()"]
    for _ in range(times):
        started = time.monotonic()
        proc = subprocess.run(
            [*command, "--index-dir", str(index_dir), "compact"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        done.append(
            {
                "seconds": round(time.monotonic() - started, 2),
                "status": proc.returncode,
                "error": proc.stderr.strip()[-300:] if proc.returncode else None,
            }
        )


def client(port: int, requests: list, stop: threading.Event, counts: collections.Counter):
    """Send ``requests`` round-robin on one keep-alive connection until ``stop``; count each
    answer by status and each connection error by kind (a new connection after one)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    i = 0
    while not stop.is_set():
        method, path, body = requests[i % len(requests)]
        i += 1
        try:
            headers = {"Content-Type": "application/json"} if body else {}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            counts[f"status {response.status}"] += 1
        except (OSError, http.client.HTTPException) as err:
            counts[f"connection error {type(err).__name__}"] += 1
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--index-dir", type=Path, required=True, help="built here if missing")
    parser.add_argument("--model", type=Path, default=ROOT / "qres" / "models" / "default")
    parser.add_argument("--data-dir", type=Path, default=repo_shared_data())
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--compactions", type=int, default=12)
    parser.add_argument("--mode", default="hybrid", choices=["bm25", "dense", "hybrid"])
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args()

    forum = SyntheticForum(args.data_dir)
    index = build_index(args.index_dir, args.docs, forum, args.model)
    texts = forum.query_texts(args.queries)
    requests = []
    for n, text in enumerate(texts):
        if n % 2:
            body = json.dumps({"title": text, "body": texts[n - 1], "mode": args.mode})
            requests.append(("POST", "/search", body))
        else:
            query = urllib.parse.urlencode({"q": text, "k": 10, "mode": args.mode})
            requests.append(("GET", "/search?" + query, None))
    port = free_port()
    log_path = args.index_dir.with_name(args.index_dir.name + "-swap-serve.log")
    load_before = os.getloadavg()
    with open(log_path, "wb") as log:
        server = start_server(args.index_dir, port, 1, log)
        try:
            stop, counts = threading.Event(), collections.Counter()
            clients = [
                threading.Thread(target=client, args=(port, requests, stop, counts))
                for _ in range(args.clients)
            ]
            compactions: list[dict] = []
            started = time.monotonic()
            for thread in clients:
                thread.start()
            compact_repeatedly(args.index_dir, args.compactions, compactions)
            time.sleep(1.0)
            stop.set()
            for thread in clients:
                thread.join()
            elapsed = time.monotonic() - started
        finally:
            server.terminate()
            server.wait(30)
    server_log = log_path.read_text(errors="replace")
    answered = sum(v for k, v in counts.items() if k.startswith("status"))
    failed_5xx = sum(v for k, v in counts.items() if k.startswith("status 5"))
    resets = sum(v for k, v in counts.items() if k.startswith("connection error"))
    print(
        json.dumps(
            {
                "benchmark": "serve_swap_stress",
                "machine": {**machine(), "load_average_before": load_before},
                "load_average_after": os.getloadavg(),
                "index": index,
                "mode": args.mode,
                "clients": args.clients,
                "requests": "GET /search and POST /search (title and body), alternately",
                "seconds": round(elapsed, 1),
                "compactions": compactions,
                "compactions_ok": sum(c["status"] == 0 for c in compactions),
                "answers": answered,
                "answers_5xx": failed_5xx,
                "connection_errors": resets,
                "by_outcome": dict(sorted(counts.items())),
                "server_log_tracebacks": server_log.count("Traceback"),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
