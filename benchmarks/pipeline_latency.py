"""In-process search latency over an existing index, each first stage side by side, as JSON.

    python benchmarks/pipeline_latency.py --index-dir DIR [--queries-from CORPUS]
                                          [--queries 500] [--k 10]

Opens the index as ``qres search`` does (its own models and fusion) and times, query by query
and in rotating order so all see the same load:

* ``bm25`` — BM25's top k;
* ``hybrid_bm25_candidates`` — BM25's top 100 rescored and fused (``--dense-candidates 0``);
* ``hybrid_dense_first_stage`` — BM25's top 100 joined by the nearest 100 questions of the
  index's first-stage models (for a model set its transformers,
  :data:`qres.encoders.model_set.FIRST_STAGE`), what ``qres search`` runs;
* ``hybrid_every_model_first_stage`` — the same with every model's nearest questions, the
  peer of the one above where the first stage leaves a model out (a model set's GRU, the
  shipped GRU alone: :func:`qres.encoders.model_set.first_stage_of`; absent otherwise);
* ``hybrid_shown`` — ``qres search`` whole: the ranking with the results' stored fields read
  for display, a closed duplicate found giving way to its original (:mod:`qres.ranking.
  duplicates`), and its peer ``hybrid_shown_keep_duplicates`` (``--keep-duplicates``).

The engines above the last two rank alone, duplicates shown as themselves; in an index
holding duplicate links, ``bm25_following_links`` is bm25 ranked alone with them followed.

Before them, ``opening``: opening the index, the pipeline (its models loaded), and the first
bm25 and hybrid searches. Every query is encoded by every model in each hybrid timing.
Queries are the titles of ``--queries-from`` (any corpus ``qres index`` reads), else
synthetic ones
(benchmarks/synthetic.py). The ratios (``*_over_bm25_candidates_p50``) are the figures to
compare across loaded machines.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine, summary, timed_in_turn  # noqa: E402
from synthetic import SyntheticForum  # noqa: E402

from qres.backends import open_backend  # noqa: E402
from qres.corpus.readers import read_corpus  # noqa: E402
from qres.paths import repo_shared_data  # noqa: E402
from qres.ranking.search import SearchPipeline  # noqa: E402


def query_texts(args) -> list[str]:
    if args.queries_from:
        titles = (q.title for q in read_corpus(args.queries_from) if q.title)
        return list(itertools.islice(titles, args.queries))
    return SyntheticForum(args.data_dir).query_texts(args.queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index-dir", type=Path, required=True, help="an index with vectors")
    parser.add_argument("--queries-from", type=Path, help="corpus whose titles are the queries")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--k", type=int, default=10, help="results per query")
    parser.add_argument("--warm-up", type=int, default=30, help="untimed queries per engine")
    parser.add_argument("--data-dir", type=Path, default=repo_shared_data())
    args = parser.parse_args()

    started = time.perf_counter()
    backend = open_backend("embedded", args.index_dir)
    try:
        opened = {"open_ms": round(1000 * (time.perf_counter() - started), 1)}
        result = run(args, backend, opened)
    finally:
        backend.close()
    print(json.dumps(result, indent=2))


def run(args, backend, opened: dict) -> dict:
    queries = query_texts(args)
    if not queries:
        raise SystemExit(f"{args.queries_from}: no titles to use as queries")
    started = time.perf_counter()
    dense = SearchPipeline.for_index(backend)
    opened["pipeline_ms"] = round(1000 * (time.perf_counter() - started), 1)
    for mode in ("bm25", "hybrid"):  # the first searches after opening: files mapped, read
        started = time.perf_counter()
        dense.search(queries[0], args.k, mode, with_text=False)
        opened[f"first_{mode}_ms"] = round(1000 * (time.perf_counter() - started), 1)
    if dense.encoder is None:
        raise SystemExit(f"{args.index_dir}: the index holds no vectors (index with a model)")
    shown, kept = SearchPipeline.for_index(backend), SearchPipeline.for_index(backend)
    dense.follow_duplicates = kept.follow_duplicates = False
    bm25_only = SearchPipeline(backend, dense.encoders, dense.fusion, dense_candidates=0)
    bm25_only.follow_duplicates = False
    engines = {
        "bm25": lambda t: dense.search(t, args.k, "bm25", with_text=False),
        "hybrid_bm25_candidates": lambda t: bm25_only.search(t, args.k, with_text=False),
        "hybrid_dense_first_stage": lambda t: dense.search(t, args.k, with_text=False),
    }
    if dense.first_stage is not None and dense.first_stage != {
        e.fingerprint for e in dense.encoders
    }:
        every = SearchPipeline(backend, dense.encoders, dense.fusion)
        every.first_stage, every.follow_duplicates = None, False
        engines["hybrid_every_model_first_stage"] = lambda t: every.search(
            t, args.k, with_text=False
        )
    if shown.follow_duplicates:  # ranked alone, the links followed (bm25's peer above)
        engines["bm25_following_links"] = lambda t: shown.search(t, args.k, "bm25", with_text=False)
    engines["hybrid_shown"] = lambda t: shown.search(t, args.k)
    engines["hybrid_shown_keep_duplicates"] = lambda t: kept.search(t, args.k)
    times = timed_in_turn(engines, queries, args.warm_up)
    latency = {name: summary(t) for name, t in times.items()}
    base = latency["hybrid_bm25_candidates"]["p50_ms"]
    return {
        "benchmark": "pipeline_latency",
        "index_dir": str(args.index_dir),
        "questions": backend.count(),
        "models": [e.fingerprint for e in dense.encoders],
        "first_stage": sorted(dense.first_stage) if dense.first_stage is not None else "every",
        "queries": len(queries),
        "queries_from": str(args.queries_from) if args.queries_from else "synthetic",
        "k": args.k,
        "opening": opened,
        "latency": latency,
        **{
            f"{name}_over_bm25_candidates_p50": round(latency[name]["p50_ms"] / base, 3)
            for name in latency
            if name != "hybrid_bm25_candidates"
        },
        **(
            {
                "bm25_following_links_over_bm25_p50": round(
                    latency["bm25_following_links"]["p50_ms"] / latency["bm25"]["p50_ms"], 3
                )
            }
            if "bm25_following_links" in latency
            else {}
        ),
        "hybrid_shown_over_keep_duplicates_p50": round(
            latency["hybrid_shown"]["p50_ms"] / latency["hybrid_shown_keep_duplicates"]["p50_ms"], 3
        ),
        "machine": machine(),
    }


if __name__ == "__main__":
    main()
