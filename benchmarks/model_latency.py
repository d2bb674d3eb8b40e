"""Query-encoding latency and indexing throughput of served model directories (no torch).

For each ``--model`` (a GRU export, an imported transformer, its int8 copy, …) this loads
the directory through ``qres.encoders.runtime.Encoder`` exactly as search does and measures:

* query latency: one search-box query encoded at a time (the titles of real forum
  questions), p50/p95/mean in ms;
* indexing throughput: whole questions (title + body) encoded in batches, questions/s.

Questions come from the SemEval-2016 dev XML beside the checkout. One JSON object is
printed, with the machine and its load average (the figures move with other work on it).

    python benchmarks/model_latency.py --model qres/models/default --model models/minilm
    python benchmarks/model_latency.py --model models/minilm --threads 2 --queries 200
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from qres.datasets.benchmarks import load_semeval_xml  # noqa: E402
from qres.encoders.runtime import Encoder  # noqa: E402
from qres.paths import repo_shared_data  # noqa: E402


def load_encoder(model_dir: Path, threads: int) -> Encoder:
    """The served encoder, its onnxruntime sessions limited to ``threads`` threads."""
    original = ort.SessionOptions

    def limited():
        options = original()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        return options

    ort.SessionOptions = limited
    try:
        return Encoder.load(model_dir, providers=["CPUExecutionProvider"])
    finally:
        ort.SessionOptions = original


def bench(model_dir: Path, questions, queries: int, batch: int, threads: int) -> dict:
    encoder = load_encoder(model_dir, threads)
    titles = [q.title for q in questions][:queries]
    encoder.encode_query(titles[0])  # warm-up
    latencies = []
    for title in titles:
        started = time.perf_counter()
        encoder.encode_query(title)
        latencies.append(1000 * (time.perf_counter() - started))
    encoder.encode_questions(questions[:batch], batch_size=batch)
    started = time.perf_counter()
    encoder.encode_questions(questions, batch_size=batch)
    seconds = time.perf_counter() - started
    card = encoder.card
    return {
        "model": str(model_dir),
        "architecture": card.get("architecture"),
        "quantize": card.get("encoder", {}).get("quantize"),
        "dim": encoder.dim,
        "graph_mb": round(
            sum((model_dir / g).stat().st_size for g in set(card["graphs"].values())) / 2**20, 1
        ),
        "query_ms_p50": round(float(np.percentile(latencies, 50)), 2),
        "query_ms_p95": round(float(np.percentile(latencies, 95)), 2),
        "query_ms_mean": round(float(np.mean(latencies)), 2),
        "queries": len(latencies),
        "index_questions_per_s": round(len(questions) / seconds, 1),
        "index_questions": len(questions),
        "index_batch": batch,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, action="append", required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    args = parser.parse_args()
    dev = repo_shared_data() / "semeval2016-task3" / "SemEval2016-Task3-CQA-QL-dev.xml"
    questions = list(load_semeval_xml(dev).questions.values())[: args.questions]
    results = [bench(m, questions, args.queries, args.batch, args.threads) for m in args.model]
    report = {
        "benchmark": "model_latency",
        "question_source": str(dev),
        "machine": {
            "cpu_count": os.cpu_count(),
            "load_average_1_5_15": [round(v, 2) for v in os.getloadavg()],
            "onnxruntime_threads": args.threads,
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "onnxruntime": ort.__version__,
        },
        "results": results,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
