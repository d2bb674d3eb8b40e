"""Latency of the dense first stage (``EmbeddedBackend.nearest``) as the index grows: through
its ANN file (``qres.backends.embedded.ann``) beside the exact int8 scan and BM25 top-k, on
the same index in the same run, with the ANN's recall against the exact scan, as JSON.

    python benchmarks/nearest_latency.py --docs 10000,100000 [--dim 384] [--queries 200]
    python benchmarks/nearest_latency.py --vectors-from DIR --docs 5000,10000,20000,40000
    python benchmarks/nearest_latency.py --index-dir DIR [--queries 200] [--beams 200,400]

Three sources of vectors:

* ``--docs`` alone: temporary indexes of that many synthetic questions (benchmarks/synthetic.py)
  with random unit vectors of ``--dim`` dimensions (float16, as indexing stores them). Random
  vectors have no neighbourhood structure: latency only, recall is flattering or not telling.
* ``--vectors-from DIR --docs N,...``: temporary indexes of the first N questions of the index
  at DIR with their real vectors (its first-stage model), an ANN file written whatever the
  size: where nearest() through the graph overtakes the exact scan (``ann.MIN_ROWS``).
* ``--index-dir DIR``: that index as it is (no copy); with ``--beams``, timed once per search
  beam (the candidates taken from the graph, ``ann.beam``'s choice otherwise).

With real vectors the queries are titles of the index's own questions (evenly spread), or
of the corpus ``--queries-from`` names (``--index-dir``), encoded by its model as search
encodes them (``--index-dir``, ``--vectors-from``); with
random ones, random unit vectors. Timed in turn per query: ``nearest`` (what search runs:
the graph where there is an ANN file, then the stored vectors rank its candidates),
``nearest_exact`` (the int8 scan of every row, :meth:`EmbeddedBackend.nearest_exact`) and BM25
``search`` (top ``--k``), wall time and the thread's CPU time (steadier on a loaded
machine); ``recall`` is the share of ``nearest_exact``'s top k that
``nearest`` returned. ``nearest_over_exact_p50`` and ``nearest_over_bm25_p50`` are the figures
to compare across loaded machines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tantivy

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine, summary  # noqa: E402
from synthetic import SyntheticForum  # noqa: E402

from qres.backends.embedded import EmbeddedBackend, ann  # noqa: E402
from qres.paths import repo_shared_data  # noqa: E402

BATCH = 10_000


def unit_rows(rng, n: int, dim: int) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def time_index(backend, texts: list[str], vectors: np.ndarray, k: int, model=None) -> dict:
    """``nearest``, ``nearest_exact`` and BM25 timed in turn, query by query."""
    for i in range(min(20, len(texts))):  # warm-up: page the files in, quantise the rows
        backend.nearest(vectors[i], k, model)
        backend.nearest_exact(vectors[i], k, model)
        backend.search(texts[i], k)
    engines = {
        "nearest": lambda text, vector: backend.nearest(vector, k, model),
        "nearest_exact": lambda text, vector: backend.nearest_exact(vector, k, model),
        "bm25": lambda text, vector: backend.search(text, k),
    }
    times: dict[str, list[float]] = {name: [] for name in engines}
    cpu: dict[str, list[float]] = {name: [] for name in engines}
    recall = []
    for text, vector in zip(texts, vectors, strict=True):
        found = {}
        for name, engine in engines.items():
            t, c = time.perf_counter(), time.thread_time()
            found[name] = engine(text, vector)
            times[name].append(1000 * (time.perf_counter() - t))
            cpu[name].append(1000 * (time.thread_time() - c))
        exact = {h.id for h in found["nearest_exact"]}
        if exact:
            recall.append(len({h.id for h in found["nearest"]} & exact) / len(exact))
    latency = {
        name: {**summary(t), "cpu_p50_ms": round(float(np.percentile(cpu[name], 50)), 3)}
        for name, t in times.items()
    }
    snapshot = backend._snapshot
    graph = backend._ann_file(backend._model_number(model) if model else 0, snapshot)
    return {
        "questions": backend.count(),
        "ann_file_rows": graph.rows if graph is not None else None,
        **latency,
        f"recall@{k}": round(float(np.mean(recall)), 4),
        f"recall@{k}_min": round(float(np.min(recall)), 3),
        "nearest_over_exact_p50": round(
            latency["nearest"]["p50_ms"] / latency["nearest_exact"]["p50_ms"], 3
        ),
        "nearest_over_bm25_p50": round(latency["nearest"]["p50_ms"] / latency["bm25"]["p50_ms"], 3),
        "nearest_over_exact_cpu_p50": round(
            latency["nearest"]["cpu_p50_ms"] / latency["nearest_exact"]["cpu_p50_ms"], 3
        ),
    }


def synthetic(forum: SyntheticForum, docs: int, dim: int, queries: int, k: int) -> dict:
    rng = np.random.default_rng(docs)
    with tempfile.TemporaryDirectory() as tmp:
        backend = EmbeddedBackend(Path(tmp) / "ix", create=True)
        stream = forum.questions(docs)
        started = time.perf_counter()
        for start in range(0, docs, BATCH):
            batch = [next(stream) for _ in range(min(BATCH, docs - start))]
            backend.upsert(batch, unit_rows(rng, len(batch), dim))
            backend.commit()
        backend.update_nearest()
        build_s = time.perf_counter() - started
        result = time_index(backend, forum.query_texts(queries), unit_rows(rng, queries, dim), k)
        backend.close()
    return {"docs": docs, "dim": dim, "vectors": "random", "build_s": round(build_s, 1), **result}


def corpus_titles(path: Path, count: int) -> list[str]:
    """``count`` titles spread evenly over the corpus at ``path``."""
    from qres.corpus.readers import read_corpus

    titles = [q.title for q in read_corpus(path) if q.title]
    step = max(1, len(titles) // count)
    return titles[::step][:count]


class RealIndex:
    """An index's questions by vector row, its first-stage model and title queries."""

    def __init__(self, index_dir: Path, queries: int, queries_from: Path | None = None):
        from qres.ranking.search import SearchPipeline

        self.backend = EmbeddedBackend(index_dir)
        pipeline = SearchPipeline.for_index(self.backend)
        stage = sorted(pipeline.first_stage) if pipeline.first_stage else None
        self.encoder = next(e for e in pipeline.encoders if stage is None or e.fingerprint in stage)
        several = len(pipeline.encoders) > 1
        self.model = self.encoder.fingerprint if several else None
        self.number = self.backend._model_number(self.model) if several else 0
        if queries_from is not None:
            self.titles = corpus_titles(queries_from, queries)
        else:
            searcher = self.backend._snapshot.index.searcher()
            count = searcher.num_docs
            step = max(1, count // queries)
            hits = searcher.search(tantivy.Query.all_query(), count, count=False).hits
            picked = [address for _, address in hits[::step][:queries]]
            self.titles = [searcher.doc(a).to_dict()["title"][0].decode() for a in picked]
        self.query_vectors = np.stack([self.encoder.encode_query(t) for t in self.titles])

    def first(self, n: int):
        """The questions of the first ``n`` vector rows, with each model's rows."""
        searcher = self.backend._snapshot.index.searcher()
        query = tantivy.Query.range_query(
            self.backend._schema,
            "slot",
            tantivy.FieldType.Integer,
            lower_bound=0,
            upper_bound=n - 1,
        )
        hits = searcher.search(query, n, count=False).hits
        addresses = [a for _, a in hits]
        slots = searcher.fast_field_values("slot", addresses)
        docs = {s: searcher.doc(a).to_dict() for s, a in zip(slots, addresses, strict=True)}
        from qres.backends.embedded.documents import question_of

        order = sorted(docs)
        questions = [question_of(docs[s]["id"][0], docs[s]) for s in order]
        models = self.backend.vector_models()
        vectors = {
            fp: np.asarray(self.backend._vector_rows(n, m)[order], np.float32)
            for m, fp in enumerate(models)
        }
        return questions, vectors if len(models) > 1 else next(iter(vectors.values()))


def subsets(real: RealIndex, sizes: list[int], k: int) -> list[dict]:
    out = []
    for n in sizes:
        questions, vectors = real.first(n)
        with tempfile.TemporaryDirectory() as tmp, _ann_from(0):
            backend = EmbeddedBackend(Path(tmp) / "ix", create=True)
            if isinstance(vectors, dict):
                backend.set_metadata(
                    {k_: v for k_, v in real.backend.metadata().items() if "model" in k_}
                )
            started = time.perf_counter()
            for start in range(0, len(questions), BATCH):
                part = slice(start, start + BATCH)
                rows = (
                    {fp: v[part] for fp, v in vectors.items()}
                    if isinstance(vectors, dict)
                    else vectors[part]
                )
                backend.upsert(questions[part], rows)
            backend.commit()
            build_s = time.perf_counter() - started
            result = time_index(backend, real.titles, real.query_vectors, k, real.model)
            backend.close()
        out.append(
            {"docs": len(questions), "vectors": "real", "build_s": round(build_s, 1), **result}
        )
    return out


@contextlib.contextmanager
def _ann_from(rows: int):
    """ANN files written from ``rows`` live rows on, meanwhile."""
    before = ann.MIN_ROWS
    ann.MIN_ROWS = rows
    try:
        yield
    finally:
        ann.MIN_ROWS = before


@contextlib.contextmanager
def _beam(width: int | None):
    """The graph's search beam set to ``width`` meanwhile (None: ``ann.beam``'s own)."""
    before = ann.beam
    if width is not None:
        ann.beam = lambda rows, k: max(k, width)
    try:
        yield
    finally:
        ann.beam = before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", default="10000,100000", help="comma-separated index sizes")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--vectors-from", type=Path, help="an index whose real vectors to use")
    parser.add_argument("--index-dir", type=Path, help="time this index as it is")
    parser.add_argument(
        "--beams", help="with --index-dir: comma-separated graph beams, each timed in turn"
    )
    parser.add_argument(
        "--queries-from",
        type=Path,
        help="with --index-dir: titles of this corpus, evenly spread, as the queries "
        "[the index's own titles]",
    )
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.docs.split(",")]
    report: dict = {"benchmark": "nearest_latency", "k": args.k}
    if args.index_dir:
        real = RealIndex(args.index_dir, args.queries, args.queries_from)
        report["index_dir"] = str(args.index_dir)
        report["queries_from"] = str(args.queries_from or "the index's own titles")
        report["model"] = Path(real.encoder.model_dir).name
        beams = [int(b) for b in args.beams.split(",")] if args.beams else [None]
        report["results"] = []
        for width in beams:
            with _beam(width):
                result = time_index(
                    real.backend, real.titles, real.query_vectors, args.k, real.model
                )
            rows = result["ann_file_rows"]
            used = (width or ann.beam(rows, args.k)) if rows else None  # None: no graph
            report["results"].append({"beam": used, **result})
    elif args.vectors_from:
        real = RealIndex(args.vectors_from, args.queries)
        report["vectors_from"] = str(args.vectors_from)
        report["model"] = Path(real.encoder.model_dir).name
        report["results"] = subsets(real, sizes, args.k)
    else:
        forum = SyntheticForum(repo_shared_data())
        report["results"] = [synthetic(forum, n, args.dim, args.queries, args.k) for n in sizes]
    report["machine"] = {**machine(), "load_average": os.getloadavg()}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
