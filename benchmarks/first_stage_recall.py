"""Recall of each first stage on a forum's duplicate queries, as JSON: BM25's top K, the
top K nearest by each model's vectors, and their union (what dense and hybrid then rescore).

    python benchmarks/first_stage_recall.py --model DIR [--model DIR ...] [--split test] [--k 100]
    python benchmarks/first_stage_recall.py --model-set fast [--split test]

The same evaluation index as ``qres evaluate --dataset stackexchange`` with the same models
(built on first use under $QRES_HOME/eval); each query is its question's title and body, its
own id left out of every stage. ``dense`` joins the nearest of the models whose nearest
questions search adds (a model set's transformers, :data:`qres.encoders.model_set.FIRST_STAGE`;
otherwise every model); ``union`` is that with BM25's. Recall = linked originals found /
linked originals, averaged over queries (percent), as R@K of qres evaluate.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.encoders import model_set  # noqa: E402
from qres.encoders.runtime import Encoder  # noqa: E402
from qres.evaluation.forum_fusion import index_key  # noqa: E402
from qres.evaluation.rankers import ensure_index, open_eval_index  # noqa: E402
from qres.evaluation.runner import eval_index_name, load_benchmark  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, action="append", default=[])
    parser.add_argument("--model-set", choices=list(model_set.SETS))
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--k", type=int, default=100)
    args = parser.parse_args(argv)
    if bool(args.model) == bool(args.model_set):
        parser.error("give --model (one or more) or --model-set")
    dirs = model_set.model_dirs(args.model_set) if args.model_set else args.model
    benchmark = load_benchmark("stackexchange", args.split, args.data_dir)
    encoders = [Encoder.load(d) for d in dirs]
    fingerprints = [e.fingerprint for e in encoders]
    first_stage = model_set.first_stage_of(fingerprints) or set(fingerprints)
    several = len(encoders) > 1
    names = {e.fingerprint: Path(d).name for e, d in zip(encoders, dirs, strict=True)}
    recall: dict[str, list[float]] = {}
    sizes = []
    with open_eval_index(None, eval_index_name(benchmark, index_key(encoders))) as index:
        ensure_index(index, benchmark.corpus, encoders if several else encoders[0])
        for q in benchmark.queries:
            question = q.question
            hits = index.search(question.text, args.k + 1)
            found = {"bm25": set([h.id for h in hits if h.id != q.id][: args.k]), "dense": set()}
            for encoder in encoders:
                vector = encoder.encode_questions([question])[0]
                model = encoder.fingerprint if several else None
                hits = index.nearest(vector, args.k + 1, model=model)
                nearest = set([h.id for h in hits if h.id != q.id][: args.k])
                found[f"nearest {names[encoder.fingerprint]}"] = nearest
                if encoder.fingerprint in first_stage:
                    found["dense"] |= nearest
            found["union"] = found["bm25"] | found["dense"]
            for name, ids in found.items():
                recall.setdefault(name, []).append(100 * len(q.relevant & ids) / len(q.relevant))
            sizes.append(len(found["union"]))
    print(
        json.dumps(
            {
                "benchmark": "first_stage_recall",
                "machine": machine(),
                "models": [str(d) for d in dirs],
                "model_set": args.model_set,
                "first_stage": sorted(names[f] for f in first_stage),
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
