"""Indexing throughput and single-query latency of a backend, as JSON.

    python benchmarks/search_latency.py --docs 100000 [--model MODEL_DIR] [--queries 1000]
    python benchmarks/search_latency.py --backend elasticsearch --docs 100000 --model MODEL_DIR

``--backend elasticsearch`` uses the cluster of QRES_ES_URL (QRES_ES_USER, QRES_ES_PASSWORD)
and a throw-away index ``qres-bench-<random>``, deleted at the end.

Builds a synthetic corpus (benchmarks/synthetic.py) in a temporary index, then times
single queries through the production SearchPipeline: top-100 BM25, and with a model
also dense and hybrid (BM25 top-100 rescored). Each query is timed alone, after 50 warm-up
queries; the first measurement of the index build includes encoding when a model is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import SyntheticForum  # noqa: E402

from qres.backends import BACKENDS, BackendError, open_backend  # noqa: E402
from qres.indexing import index_questions  # noqa: E402
from qres.paths import repo_shared_data  # noqa: E402
from qres.search import SearchPipeline  # noqa: E402


def machine() -> dict:
    return {
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--model", type=Path, help="model dir: also time dense and hybrid")
    parser.add_argument("--data-dir", type=Path, default=repo_shared_data())
    parser.add_argument("--index-dir", type=Path, help="keep the index here (default: temp)")
    parser.add_argument("--backend", choices=BACKENDS, default="embedded")
    args = parser.parse_args()

    encoder = None
    if args.model:
        from qres.encoder import Encoder

        encoder = Encoder.load(args.model)
    forum = SyntheticForum(args.data_dir)
    workdir = args.index_dir or Path(tempfile.mkdtemp(prefix="qres-bench-"))
    index_name = f"qres-bench-{uuid.uuid4().hex[:8]}"
    backend = open_backend(args.backend, workdir / "index", create=True, index=index_name)
    try:
        result = run(args, backend, encoder, forum, workdir)
    finally:
        if args.backend == "elasticsearch":
            backend.drop()
        backend.close()
    print(json.dumps(result, indent=2))


def run(args, backend, encoder, forum, workdir: Path) -> dict:
    report = index_questions(backend, forum.questions(args.docs), encoder=encoder, batch_size=512)
    index_bytes = sum(f.stat().st_size for f in (workdir / "index").rglob("*") if f.is_file())

    pipeline = SearchPipeline(backend, encoder)
    queries = forum.query_texts(args.queries)
    modes = ["bm25"] + (["dense", "hybrid"] if encoder else [])
    latency = {}
    for mode in modes:
        for text in queries[:50]:
            pipeline.search(text, 10, mode)
        times = []
        for text in queries:
            start = time.perf_counter()
            pipeline.search(text, 10, mode)
            times.append((time.perf_counter() - start) * 1000)
        latency[mode] = {
            "p50_ms": round(float(np.percentile(times, 50)), 3),
            "p99_ms": round(float(np.percentile(times, 99)), 3),
            "mean_ms": round(float(np.mean(times)), 3),
        }
    result = {
        "benchmark": "search_latency",
        "backend": args.backend,
        "machine": machine(),
        "corpus": {"questions": args.docs, "kind": "synthetic, SemEval word distribution"},
        "candidates": pipeline.candidates,
        "queries": len(queries),
        "model": None if encoder is None else encoder.card.get("architecture", str(args.model)),
        "providers": None if encoder is None else encoder.providers,
        "indexing": {
            "seconds": round(report.seconds, 1),
            "docs_per_second": round(report.docs_per_second, 1),
            "with_encoding": encoder is not None,
            "index_mb": round(index_bytes / 2**20, 1) if args.backend == "embedded" else None,
        },
        "latency": latency,
    }
    if "hybrid" in latency:
        result["hybrid_over_bm25_p50"] = round(
            latency["hybrid"]["p50_ms"] / latency["bm25"]["p50_ms"], 2
        )
    return result


if __name__ == "__main__":
    try:
        main()
    except BackendError as err:
        sys.exit(f"error: {err}")
