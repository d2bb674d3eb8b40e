"""Recall of each first stage on a forum's duplicate queries, as JSON: BM25's top K, the
top K nearest by one model's vectors, and their union (what dense and hybrid then rescore).

    python benchmarks/first_stage_recall.py --model DIR [--data-dir DIR] [--split test] [--k 100]

The same evaluation index as ``qres evaluate --dataset stackexchange --model DIR`` (built
on first use under $QRES_HOME/eval); each query is its question's title and body, its own
id left out of every stage. Recall = linked originals found / linked originals, averaged
over queries (percent), as R@K of qres evaluate.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.encoders.runtime import Encoder  # noqa: E402
from qres.evaluation.rankers import ensure_index, open_eval_index  # noqa: E402
from qres.evaluation.runner import eval_index_name, load_benchmark  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--k", type=int, default=100)
    args = parser.parse_args(argv)
    benchmark = load_benchmark("stackexchange", args.split, args.data_dir)
    encoder = Encoder.load(args.model)
    recall = {"bm25": [], "dense": [], "union": []}
    sizes = []
    with open_eval_index(None, eval_index_name(benchmark, encoder.fingerprint[:16])) as index:
        ensure_index(index, benchmark.corpus, encoder)
        for q in benchmark.queries:
            question = q.question
            hits = index.search(question.text, args.k + 1)
            bm25 = set([h.id for h in hits if h.id != q.id][: args.k])
            vector = encoder.encode_questions([question])[0]
            hits = index.nearest(vector, args.k + 1)
            dense = set([h.id for h in hits if h.id != q.id][: args.k])
            for name, found in (("bm25", bm25), ("dense", dense), ("union", bm25 | dense)):
                recall[name].append(100 * len(q.relevant & found) / len(q.relevant))
            sizes.append(len(bm25 | dense))
    print(
        json.dumps(
            {
                "benchmark": "first_stage_recall",
                "machine": machine(),
                "model": str(args.model),
                "split": args.split,
                "queries": len(benchmark.queries),
                "k": args.k,
                "recall_percent": {k: round(float(np.mean(v)), 2) for k, v in recall.items()},
                "mean_union_size": round(float(np.mean(sizes)), 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
