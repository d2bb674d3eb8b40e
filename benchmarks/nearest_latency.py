"""Latency of the dense first stage's exact search (``EmbeddedBackend.nearest``) as the
index grows, beside BM25 top-k on the same index in the same run, as JSON.

    python benchmarks/nearest_latency.py --docs 10000,100000 [--dim 384] [--queries 200]

For each size: a temporary embedded index of that many synthetic questions
(benchmarks/synthetic.py) with random unit vectors of ``--dim`` dimensions (float16, as
indexing stores them; latency does not depend on what the vectors mean), then ``--queries``
queries timed alternately: ``nearest`` (top ``--k`` by exact cosine over every stored row)
and BM25 ``search`` (top ``--k``). ``nearest_over_bm25_p50`` is the figure to compare across
loaded machines.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine, summary  # noqa: E402
from synthetic import SyntheticForum  # noqa: E402

from qres.backends.embedded import EmbeddedBackend  # noqa: E402
from qres.paths import repo_shared_data  # noqa: E402

BATCH = 10_000


def unit_rows(rng, n: int, dim: int) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def measure(forum: SyntheticForum, docs: int, dim: int, queries: int, k: int) -> dict:
    rng = np.random.default_rng(docs)
    with tempfile.TemporaryDirectory() as tmp:
        backend = EmbeddedBackend(Path(tmp) / "ix", create=True)
        stream = forum.questions(docs)
        started = time.perf_counter()
        for start in range(0, docs, BATCH):
            batch = [next(stream) for _ in range(min(BATCH, docs - start))]
            backend.upsert(batch, unit_rows(rng, len(batch), dim))
        backend.commit()
        build_s = time.perf_counter() - started
        texts = forum.query_texts(queries)
        vectors = unit_rows(rng, queries, dim)
        for i in range(20):  # warm-up: page the vector file and tantivy's segments in
            backend.nearest(vectors[i], k)
            backend.search(texts[i], k)
        nearest_ms, bm25_ms = [], []
        for text, vector in zip(texts, vectors, strict=True):
            t = time.perf_counter()
            backend.nearest(vector, k)
            nearest_ms.append(1000 * (time.perf_counter() - t))
            t = time.perf_counter()
            backend.search(text, k)
            bm25_ms.append(1000 * (time.perf_counter() - t))
        backend.close()
    near, bm25 = summary(nearest_ms), summary(bm25_ms)
    return {
        "docs": docs,
        "dim": dim,
        "k": k,
        "queries": queries,
        "build_s": round(build_s, 1),
        "nearest": near,
        "bm25": bm25,
        "nearest_over_bm25_p50": round(near["p50_ms"] / bm25["p50_ms"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", default="10000,100000", help="comma-separated index sizes")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=100)
    args = parser.parse_args(argv)
    forum = SyntheticForum(repo_shared_data())
    sizes = [int(n) for n in args.docs.split(",")]
    results = [measure(forum, n, args.dim, args.queries, args.k) for n in sizes]
    print(json.dumps({"benchmark": "nearest_latency", "machine": machine(), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
