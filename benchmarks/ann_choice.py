"""Approximate nearest-neighbour libraries compared on an index's real vectors, as JSON:
recall@k against the exact scan, query latency, build time, memory and disk.

    python benchmarks/ann_choice.py --index-dir DIR [--model FINGERPRINT] [--queries 500]
        [--k 100] [--candidates usearch-i8-16,faiss-hnsw-32,...] [--ef 100,200,400]

Vectors: every row of the index's vector file of one model (default: the index's first stage,
for a model set its transformer), as stored (float16), read as float32. Queries: titles of
real questions (the seed of benchmarks/real_text.py, one in every ``41803 // --queries``),
encoded by that model's query encoder as search encodes them. Truth: the exact top ``--k``
by cosine (float32 dot products of the unit vectors).

Each candidate is built (2 threads, as two cores allow) and saved in a child process, then
loaded for search in another (as a serving worker would, memory-mapped where the library can)
and searched one query at a time on one thread (wall and the thread's CPU time: on a loaded
machine the CPU time is the steadier figure), for each ``--ef`` (the search beam): the
beam's ``ef`` results are ranked again by the exact cosine of the stored vectors and the top
k kept, which is what qres does with them, so ``recall`` is that of qres's result. Per
candidate: build seconds and peak RSS, file MB, RSS of the loaded index (and its anonymous
part, which each process of a server holds on its own: file pages mapped by several are
held once), and per ef recall@k and latency p50/p99 (rerank included). ``exact_int8``:
qres's exact int8 scan (``EmbeddedBackend.nearest_exact``) on the same index, the peer.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_text import kaggle_questions  # noqa: E402
from search_latency import machine, summary  # noqa: E402

CANDIDATES = {
    # name: (library, settings)
    "usearch-i8-16": ("usearch", {"dtype": "i8", "connectivity": 16}),
    # what qres builds (qres.backends.embedded.ann.EXPANSION_ADD): half the build beam
    "usearch-i8-16-add64": ("usearch", {"dtype": "i8", "connectivity": 16, "expansion_add": 64}),
    "usearch-i8-32": ("usearch", {"dtype": "i8", "connectivity": 32}),
    "usearch-i8-scaled-16": ("usearch", {"dtype": "i8", "connectivity": 16, "scaled": True}),
    "usearch-f16-16": ("usearch", {"dtype": "f16", "connectivity": 16}),
    "faiss-hnsw-32": ("faiss", {"kind": "HNSW32,Flat"}),
    "faiss-hnsw-sq8-32": ("faiss", {"kind": "HNSW32,SQ8"}),
    "faiss-ivf-sq8": ("faiss", {"kind": "IVF{nlist},SQ8"}),
    "hnswlib-16": ("hnswlib", {"M": 16}),
    "hnswlib-32": ("hnswlib", {"M": 32}),
}
EF_CONSTRUCTION = 128  # the build beam, unless a candidate sets its own


def _memory() -> dict:
    """This process's resident memory (MB) and its anonymous part (heap: not file pages,
    which the processes of a server mapping the same file share)."""
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                fields[name] = int(rest.split()[0]) / 1024
    return {
        "rss_mb": round(fields.get("Rss", 0), 1),
        "private_mb": round(fields.get("Anonymous", 0), 1),
    }


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- the libraries, each as build(vectors, threads, settings) -> saved file, load, search --


def build(library: str, settings: dict, vectors: np.ndarray, path: Path) -> None:
    n, dim = vectors.shape
    if library == "usearch":
        from usearch.index import Index

        index = Index(
            ndim=dim, metric="cos", dtype=settings["dtype"],
            connectivity=settings["connectivity"],
            expansion_add=settings.get("expansion_add", EF_CONSTRUCTION),
        )  # fmt: skip
        if settings.get("scaled"):  # each row to ±1 at its largest component: i8 uses its range
            vectors = vectors / np.abs(vectors).max(axis=1, keepdims=True)
        index.add(np.arange(n, dtype=np.uint64), vectors, threads=2)
        index.save(str(path))
    elif library == "faiss":
        import faiss

        faiss.omp_set_num_threads(2)
        kind = settings["kind"].format(nlist=int(4 * np.sqrt(n)))
        index = faiss.index_factory(dim, kind, faiss.METRIC_INNER_PRODUCT)
        if "HNSW" in kind:
            faiss.downcast_index(index).hnsw.efConstruction = EF_CONSTRUCTION
        index.train(vectors)
        index.add(vectors)
        faiss.write_index(index, str(path))
    else:
        import hnswlib

        index = hnswlib.Index(space="ip", dim=dim)
        index.init_index(max_elements=n, ef_construction=EF_CONSTRUCTION, M=settings["M"])
        index.set_num_threads(2)
        index.add_items(vectors, np.arange(n))
        index.save_index(str(path))


def load(library: str, settings: dict, path: Path, dim: int):
    if library == "usearch":
        from usearch.index import Index

        return Index.restore(str(path), view=True)  # memory-mapped
    if library == "faiss":
        import faiss

        faiss.omp_set_num_threads(1)
        try:
            return faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        except RuntimeError:  # an index type faiss cannot map: read whole
            return faiss.read_index(str(path))
    import hnswlib

    index = hnswlib.Index(space="ip", dim=dim)
    index.load_index(str(path))
    index.set_num_threads(1)
    return index


def searcher(library: str, settings: dict, index, ef: int):
    """A function query vector → up to ``ef`` row numbers, one thread."""
    if library == "usearch":
        index.expansion_search = ef
        if settings.get("scaled"):
            return lambda q: index.search(q / np.abs(q).max(), ef, threads=1).keys
        return lambda q: index.search(q, ef, threads=1).keys
    if library == "faiss":
        import faiss

        inner = faiss.downcast_index(index)
        if hasattr(inner, "hnsw"):
            params = faiss.SearchParametersHNSW(efSearch=ef)
        else:
            params = faiss.SearchParametersIVF(nprobe=max(1, ef // 8))
        return lambda q: index.search(q[None], ef, params=params)[1][0]
    index.set_ef(ef)
    return lambda q: index.knn_query(q[None], k=ef)[0][0]


# -- the child processes --------------------------------------------------------------------


def child_build(args) -> dict:
    library, settings = CANDIDATES[args.candidate]
    vectors = np.load(args.work / "vectors.npy")
    before = _peak_mb()
    started, cpu = time.perf_counter(), time.process_time()
    build(library, settings, vectors, args.work / args.candidate)
    return {
        "build_s": round(time.perf_counter() - started, 1),
        "build_cpu_s": round(time.process_time() - cpu, 1),
        "build_peak_rss_mb_over_vectors": round(_peak_mb() - before, 1),
        "file_mb": round((args.work / args.candidate).stat().st_size / 2**20, 1),
    }


def child_search(args) -> dict:
    library, settings = CANDIDATES[args.candidate]
    vectors = np.load(args.work / "vectors.npy", mmap_mode="r")
    queries = np.load(args.work / "queries.npy")
    truth = np.load(args.work / "truth.npy")
    baseline = _memory()
    index = load(library, settings, args.work / args.candidate, vectors.shape[1])
    k = truth.shape[1]
    out = {}
    for ef in args.ef:
        find = searcher(library, settings, index, max(ef, k))
        for q in queries[:20]:  # warm-up: page the index in
            find(q)
        times, cpu_times, recall = [], [], []
        for q, exact in zip(queries, truth, strict=True):
            t, cpu = time.perf_counter(), time.thread_time()
            rows = np.asarray(find(q), np.int64)
            rows = rows[rows >= 0]
            scores = np.asarray(vectors[np.sort(rows)], np.float32) @ q
            top = np.sort(rows)[np.argsort(-scores)[:k]]
            times.append(1000 * (time.perf_counter() - t))
            cpu_times.append(1000 * (time.thread_time() - cpu))
            recall.append(len(np.intersect1d(top, exact)) / k)
        out[str(ef)] = {
            f"recall@{k}": round(float(np.mean(recall)), 4),
            f"recall@{k}_min": round(float(np.min(recall)), 3),
            **summary(times),
            "cpu_p50_ms": round(float(np.percentile(cpu_times, 50)), 3),
        }
    loaded = _memory()
    return {
        "loaded_rss_mb": round(loaded["rss_mb"] - baseline["rss_mb"], 1),
        "loaded_private_mb": round(loaded["private_mb"] - baseline["private_mb"], 1),
        "by_ef": out,
    }


def _child(args, what: str, candidate: str) -> dict:
    command = [sys.executable, __file__, "--child", what, "--candidate", candidate]
    command += ["--work", str(args.work), "--ef", ",".join(map(str, args.ef))]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout)


# -- the parent ----------------------------------------------------------------------------


def prepare(args) -> dict:
    """Vectors, query vectors and the exact top k, saved in the work folder."""
    from qres.backends.embedded import EmbeddedBackend
    from qres.ranking.search import SearchPipeline

    backend = EmbeddedBackend(args.index_dir)
    pipeline = SearchPipeline.for_index(backend)
    encoders = {e.fingerprint: e for e in pipeline.encoders}
    fingerprint = args.model or (
        sorted(pipeline.first_stage)[0] if pipeline.first_stage else pipeline.encoder.fingerprint
    )
    number = backend._model_number(fingerprint) if len(encoders) > 1 else 0
    rows = backend._vector_rows(1, number)
    vectors = np.asarray(rows, np.float32)
    np.save(args.work / "vectors.npy", vectors)
    seeds = kaggle_questions()
    step = max(1, len(seeds) // args.queries)
    titles = [q.title for q in seeds[::step]][: args.queries]
    queries = np.stack([encoders[fingerprint].encode_query(t) for t in titles]).astype(np.float32)
    np.save(args.work / "queries.npy", queries)
    truth = []
    for start in range(0, len(queries), 64):
        scores = queries[start : start + 64] @ vectors.T
        top = np.argpartition(-scores, args.k - 1, axis=1)[:, : args.k]
        truth.append(np.sort(top, axis=1))
    np.save(args.work / "truth.npy", np.concatenate(truth))
    exact = exact_peer(backend, queries, np.concatenate(truth), args.k, number, fingerprint)
    backend.close()
    return {
        "index_dir": str(args.index_dir),
        "model": fingerprint,
        "model_dir": Path(encoders[fingerprint].model_dir).name,
        "rows": len(vectors),
        "dim": vectors.shape[1],
        "queries": len(queries),
        "k": args.k,
        "exact_int8": exact,
    }


def exact_peer(backend, queries, truth, k: int, number: int, fingerprint: str) -> dict:
    """qres's exact int8 scan on the same rows (no ANN file is used)."""
    model = fingerprint if number else None
    scan = getattr(backend, "nearest_exact", backend.nearest)
    scan(queries[0], k, model)  # warm-up: quantise the rows
    slot_of = {v: s for s, v in backend._snapshot.id_at_slot.items()}
    times, cpu_times, recall = [], [], []
    for query, want in zip(queries, truth, strict=True):
        t, cpu = time.perf_counter(), time.thread_time()
        hits = scan(query, k, model)
        times.append(1000 * (time.perf_counter() - t))
        cpu_times.append(1000 * (time.thread_time() - cpu))
        found = np.array([slot_of[h.id] for h in hits])
        recall.append(len(np.intersect1d(found, want)) / k)
    return {
        f"recall@{k}": round(float(np.mean(recall)), 4),
        **summary(times),
        "cpu_p50_ms": round(float(np.percentile(cpu_times, 50)), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index-dir", type=Path)
    parser.add_argument("--model", help="fingerprint of the model whose vectors to use")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--ef", default="100,150,200,300")
    parser.add_argument("--work", type=Path, help="folder for the vectors and indexes")
    parser.add_argument("--child", choices=["build", "search"], help=argparse.SUPPRESS)
    parser.add_argument("--candidate", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.ef = [int(e) for e in args.ef.split(",")]
    if args.child:
        result = child_build(args) if args.child == "build" else child_search(args)
        print(json.dumps(result))
        return 0
    with tempfile.TemporaryDirectory(prefix="qres-ann-", dir=args.work) as work:
        args.work = Path(work)
        report = {"benchmark": "ann_choice", **prepare(args), "candidates": {}}
        for name in args.candidates.split(","):
            built = _child(args, "build", name)
            searched = _child(args, "search", name) if "error" not in built else {}
            report["candidates"][name] = {"library": CANDIDATES[name][0], **built, **searched}
            print(json.dumps({name: report["candidates"][name]}), file=sys.stderr)
            (args.work / name).unlink(missing_ok=True)
    report["machine"] = {**machine(), "load_average": os.getloadavg()}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
