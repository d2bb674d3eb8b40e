"""What BM25's top k costs in tantivy for the query qres builds against plainer shapes, as JSON.

    python benchmarks/bm25_query_shape.py --index-dir IX --queries-from Posts.xml
        [--queries 300] [--seed 0]

qres's query (``EmbeddedBackend._query``) is, per query term, a title term wrapped in a
boost (the index's title boost) and a body term, all SHOULD. A wrapper could cost tantivy its
top-k pruning (block-max WAND wants bare term scorers), so the same terms are also searched
with the wrapper at boost 1.0 and with no wrapper at all (a different ranking: the shape's
cost only). Each query is timed on the three shapes in turn, for the top 10 and the top 100,
on the index's searcher alone (no Python around it). Run on two indexes of the same dump to
compare segment layouts (``segments`` in the output).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import tantivy

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.backends import open_backend  # noqa: E402
from qres.backends.embedded import _MAX_QUERY_TERMS  # noqa: E402
from qres.corpus.readers import read_corpus  # noqa: E402
from qres.text import bm25_terms  # noqa: E402

SEED_QUESTIONS = 41_803  # the real questions a grown dump starts with (benchmarks/real_text.py)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index-dir", type=Path, required=True)
    parser.add_argument("--queries-from", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    backend = open_backend("embedded", args.index_dir)
    backend._follow_swaps()
    searcher = backend._snapshot.index.searcher()
    titles = []
    for question in read_corpus(args.queries_from, "stackexchange"):
        titles.append(question.title)
        if len(titles) >= SEED_QUESTIONS:
            break
    titles = random.Random(args.seed).sample(titles, min(args.queries, len(titles)))

    def shaped(text: str, boost: float | None):
        clauses = []
        for term in list(dict.fromkeys(bm25_terms(text, backend.analyzer)))[:_MAX_QUERY_TERMS]:
            title = tantivy.Query.term_query(backend._schema, "title_terms", term)
            if boost is not None:
                title = tantivy.Query.boost_query(title, boost)
            body = tantivy.Query.term_query(backend._schema, "body_terms", term)
            clauses += [(tantivy.Occur.Should, title), (tantivy.Occur.Should, body)]
        return tantivy.Query.boolean_query(clauses)

    shapes = {
        "qres": backend._query,
        "wrapper_at_boost_1": lambda text: shaped(text, 1.0),
        "no_wrapper": lambda text: shaped(text, None),
    }
    p50_ms = {}
    for k in (10, 100):
        times = {name: [] for name in shapes}
        for text in titles * 2:  # the first pass warms the pages
            for name, shape in shapes.items():
                query = shape(text)
                started = time.perf_counter()
                searcher.search(query, k, count=False)
                times[name].append(time.perf_counter() - started)
        p50_ms[f"top_{k}"] = {
            name: round(statistics.median(t[len(titles) :]) * 1e3, 3) for name, t in times.items()
        }
    print(
        json.dumps(
            {
                "benchmark": "bm25_query_shape",
                "index_dir": str(args.index_dir),
                "documents": searcher.num_docs,
                "segments": searcher.num_segments,
                "queries": len(titles),
                "p50_ms": p50_ms,
                "machine": machine(),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
