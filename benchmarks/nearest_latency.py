"""Latency of the dense first stage (``EmbeddedBackend.nearest``) as the index grows, beside
BM25 top-k and an exact float32 scan on the same index in the same run, as JSON.

    python benchmarks/nearest_latency.py --docs 10000,100000 [--dim 384] [--queries 200]

For each size: a temporary embedded index of that many synthetic questions
(benchmarks/synthetic.py) with random unit vectors of ``--dim`` dimensions (float16, as
indexing stores them; latency does not depend on what the vectors mean), then ``--queries``
queries timed in turn: ``nearest`` (top ``--k``: an int8 scan of every stored row, its
shortlist ranked by the stored vectors' cosine), BM25 ``search`` (top ``--k``), and
``exact_scan``, the peer: numpy's float32 loop over a float32 copy of every stored row and
its top ``--k`` (what ``nearest`` did before the int8 scan). ``top_k_agreement``: the share
of the exact scan's top k that ``nearest`` returned, over all queries.
``nearest_over_bm25_p50`` and ``nearest_over_exact_scan_p50`` are the figures to compare
across loaded machines.
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
        ids, stored = [], []
        for start in range(0, docs, BATCH):
            batch = [next(stream) for _ in range(min(BATCH, docs - start))]
            rows = unit_rows(rng, len(batch), dim)
            backend.upsert(batch, rows)
            ids += [q.id for q in batch]
            stored.append(rows.astype(np.float16).astype(np.float32))  # as the index keeps them
        backend.commit()
        build_s = time.perf_counter() - started
        stored = np.concatenate(stored)

        def exact_scan(vector):
            cosine = np.einsum("ij,j->i", stored, vector)
            top = np.argpartition(-cosine, k - 1)[:k]
            return top[np.argsort(-cosine[top])]

        texts = forum.query_texts(queries)
        vectors = unit_rows(rng, queries, dim)
        for i in range(20):  # warm-up: page the vector file and tantivy's segments in
            backend.nearest(vectors[i], k)
            backend.search(texts[i], k)
            exact_scan(vectors[i])
        nearest_ms, bm25_ms, exact_ms, agreement = [], [], [], []
        for text, vector in zip(texts, vectors, strict=True):
            t = time.perf_counter()
            found = backend.nearest(vector, k)
            nearest_ms.append(1000 * (time.perf_counter() - t))
            t = time.perf_counter()
            backend.search(text, k)
            bm25_ms.append(1000 * (time.perf_counter() - t))
            t = time.perf_counter()
            exact = exact_scan(vector)
            exact_ms.append(1000 * (time.perf_counter() - t))
            agreement.append(len({h.id for h in found} & {ids[i] for i in exact}) / k)
        backend.close()
    near, bm25, exact = summary(nearest_ms), summary(bm25_ms), summary(exact_ms)
    return {
        "docs": docs,
        "dim": dim,
        "k": k,
        "queries": queries,
        "build_s": round(build_s, 1),
        "nearest": near,
        "bm25": bm25,
        "exact_scan": exact,
        "top_k_agreement": round(float(np.mean(agreement)), 5),
        "nearest_over_bm25_p50": round(near["p50_ms"] / bm25["p50_ms"], 2),
        "nearest_over_exact_scan_p50": round(near["p50_ms"] / exact["p50_ms"], 2),
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
