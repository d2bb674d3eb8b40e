"""Throughput and latency of `qres serve` under concurrent clients, as JSON.

    python benchmarks/serve_load.py --docs 100000 --index-dir /tmp/qres-100k \\
        [--clients 1,8,32] [--seconds 10] [--mode hybrid] [--workers 1]

Builds (or reuses, when --index-dir already holds one) a synthetic corpus index
(benchmarks/synthetic.py) with the shipped model's vectors, starts `qres serve` on a
loopback port, and for each client count runs that many closed-loop clients (each sends
its next GET /search as soon as the last answer came) for a bounded time after a warm-up.
Reports requests/s, p50/p99 latency as the client saw it, errors, and at the end the RSS of
the server's processes (and the anonymous part of it, which each worker holds on its own:
the index files they map are shared). ``--queries-from CORPUS``: its titles are the queries
(default synthetic ones); ``--typing N``: each title cut to its first N characters and asked
with ``typing=true``, as the widget asks while a title is typed (``--typing N --as-typed``:
the same cut titles without it). The clients run on
the same machine as the server and take CPU from it: the figures are for both together.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402
from synthetic import SyntheticForum  # noqa: E402

from qres.backends.base import index_models  # noqa: E402
from qres.backends.embedded import EmbeddedBackend  # noqa: E402
from qres.encoders.runtime import Encoder  # noqa: E402
from qres.indexing.pipeline import index_questions  # noqa: E402
from qres.paths import repo_shared_data  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def build_index(index_dir: Path, docs: int, forum: SyntheticForum, model: Path) -> dict:
    if (index_dir / "meta.json").exists():
        with EmbeddedBackend(index_dir) as backend:
            return {"reused": True, "questions": backend.count(), "models": model_names(backend)}
    with EmbeddedBackend(index_dir, create=True) as backend:
        report = index_questions(
            backend, forum.questions(docs), encoder=Encoder.load(model), batch_size=512
        )
        return {
            "reused": False,
            "questions": backend.count(),
            "models": model_names(backend),
            "seconds_with_encoding": round(report.seconds, 1),
        }


def model_names(backend) -> list[str]:
    """The index's models, by directory name (several for an index of a model set)."""
    return [Path(m["model_dir"] or "?").name for m in index_models(backend.metadata())]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(index_dir: Path, port: int, workers: int, log) -> subprocess.Popen:
    command = [sys.executable, "-c", "from qres.cli import main; main()"]
    command += ["--index-dir", str(index_dir), "serve", "--port", str(port)]
    command += ["--workers", str(workers)]
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit("qres serve exited early; see its log")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                return server
        except OSError:
            pass
        time.sleep(0.3)
    server.terminate()
    raise SystemExit("qres serve not ready after 180 s")


def run_clients(port: int, paths: list[str], clients: int, seconds: float) -> dict:
    """``clients`` closed-loop clients for ``seconds``; latencies in ms."""
    stop = time.monotonic() + seconds
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients

    def client(n: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        i = n * 7919
        while time.monotonic() < stop:
            path = paths[i % len(paths)]
            i += 1
            started = time.perf_counter()
            try:
                connection.request("GET", path)
                response = connection.getresponse()
                response.read()
                ok = response.status == 200
            except OSError:
                ok = False
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            latencies[n].append((time.perf_counter() - started) * 1000)
            errors[n] += not ok

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    times = np.array([t for per in latencies for t in per])
    return {
        "clients": clients,
        "requests": len(times),
        "errors": sum(errors),
        "seconds": round(elapsed, 2),
        "requests_per_second": round(len(times) / elapsed, 1),
        "p50_ms": round(float(np.percentile(times, 50)), 2),
        "p99_ms": round(float(np.percentile(times, 99)), 2),
    }


def process_memory(root: int) -> list[dict]:
    """RSS and its anonymous part (what a process holds on its own: pages of files it maps,
    the index's, are shared with the other workers) of ``root`` and every process under it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        fields = {}
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                name, _, rest = line.partition(":")
                if rest.strip().endswith("kB"):
                    fields[name] = int(rest.split()[0]) / 1024
        except OSError:
            continue
        found.append(
            {
                "pid": pid,
                "rss_mb": round(fields.get("Rss", 0), 1),
                "anonymous_mb": round(fields.get("Anonymous", 0), 1),
            }
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--index-dir", type=Path, required=True, help="built here if missing")
    parser.add_argument("--model", type=Path, default=ROOT / "qres" / "models" / "default")
    parser.add_argument("--data-dir", type=Path, default=repo_shared_data())
    parser.add_argument("--clients", default="1,8,32", help="comma-separated client counts")
    parser.add_argument("--seconds", type=float, default=10.0, help="per client count")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before each count")
    parser.add_argument("--mode", default="hybrid", choices=["bm25", "dense", "hybrid"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument(
        "--queries-from", type=Path, help="a corpus whose titles are the queries [synthetic]"
    )
    parser.add_argument("--typing", type=int, default=None, metavar="N")
    parser.add_argument("--as-typed", action="store_true", help="with --typing: typing=false")
    args = parser.parse_args()

    forum = SyntheticForum(args.data_dir)
    index = build_index(args.index_dir, args.docs, forum, args.model)
    if args.queries_from:
        from itertools import islice

        from qres.corpus.readers import read_corpus

        titles = (q.title for q in read_corpus(args.queries_from) if q.title)
        texts = list(islice(titles, args.queries))
    else:
        texts = forum.query_texts(args.queries)
    params = {"k": 10, "mode": args.mode}
    if args.typing is not None:
        from qres.evaluation.query_form import title_chars

        texts = [title_chars(t, args.typing) for t in texts]
        params["typing"] = "false" if args.as_typed else "true"
    paths = ["/search?" + urllib.parse.urlencode({"q": text, **params}) for text in texts]
    port = free_port()
    log_path = args.index_dir.with_name(args.index_dir.name + "-serve.log")
    with open(log_path, "ab") as log:
        server = start_server(args.index_dir, port, args.workers, log)
        try:
            levels = []
            for clients in (int(c) for c in args.clients.split(",")):
                run_clients(port, paths, clients, args.warmup)
                levels.append(run_clients(port, paths, clients, args.seconds))
            memory = process_memory(server.pid)
        finally:
            server.terminate()
            server.wait(30)
    print(
        json.dumps(
            {
                "benchmark": "serve_load",
                "machine": {**machine(), "load_average": os.getloadavg()},
                "corpus": {
                    "questions": index["questions"],
                    "kind": "the index found at --index-dir"
                    if index["reused"]
                    else "synthetic, SemEval word distribution",
                    "models": index["models"],
                },
                "queries": f"titles of {args.queries_from}"
                if args.queries_from
                else "synthetic, SemEval word distribution",
                "index": index,
                "mode": args.mode,
                "typing": None
                if args.typing is None
                else {"chars": args.typing, "typing": not args.as_typed},
                "k": 10,
                "server": {"workers": args.workers, "host": "127.0.0.1"},
                "client": "closed-loop http.client threads on the same machine",
                "seconds_per_level": args.seconds,
                "levels": levels,
                "server_processes": memory,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
