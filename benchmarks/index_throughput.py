"""Indexing throughput, stage by stage and end to end, in questions per second, as JSON.

    python benchmarks/index_throughput.py --docs 100000 [--model qres/models/default]

Writes a synthetic corpus (benchmarks/synthetic.py) to a TSV file, then times each stage of
``qres index`` alone on it — read (parse the TSV), tokenise (the encoder's token ids),
encode (onnxruntime on pre-tokenised batches), analyse (BM25 terms, titles' words) and write
(tantivy and the vector file, terms and vectors given) — and finally the whole pipeline as
``qres index`` runs it (:func:`qres.indexing.pipeline.index_questions`), stages overlapping,
right after the same work done one stage after another in one thread. The stage figures say
which stage bounds the end-to-end rate on this machine. Each figure also gives the process's
CPU time (all its threads): questions per CPU-second depends far less than wall rates on how
many cores other jobs leave free, so ``cores / sum(1 / questions_per_cpu_s of each stage)``
bounds what the pipeline can reach on that many idle cores (``bound_on_idle_cores``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402
from synthetic import SyntheticForum  # noqa: E402

from qres.backends.embedded import EmbeddedBackend  # noqa: E402
from qres.corpus.readers import read_corpus  # noqa: E402
from qres.indexing.pipeline import default_workers, index_questions  # noqa: E402
from qres.paths import repo_shared_data  # noqa: E402


class Timer:
    """Wall and CPU time (every thread of this process) since it was made."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def rate(self, n: int) -> dict:
        wall = time.perf_counter() - self.wall
        cpu = time.process_time() - self.cpu
        return {
            "seconds": round(wall, 2),
            "questions_per_s": round(n / max(wall, 1e-9), 1),
            "cpu_seconds": round(cpu, 2),
            "questions_per_cpu_s": round(n / max(cpu, 1e-9), 1),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--model", type=Path, help="model dir: also tokenise and encode")
    parser.add_argument("--batch-size", type=int, default=2048, help="questions per batch")
    parser.add_argument("--workers", type=int, help="prepare processes [default: auto]")
    parser.add_argument("--data-dir", type=Path, default=repo_shared_data())
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="qres-throughput-"))
    try:
        result = measure(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))


def measure(args, workdir: Path) -> dict:
    corpus = workdir / "corpus.tsv"
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("id\ttitle\tbody\n")
        for q in SyntheticForum(args.data_dir).questions(args.docs):
            f.write(f"{q.id}\t{q.title}\t{q.body}\n")

    stages = {}
    timer = Timer()
    questions = list(read_corpus(corpus))
    stages["read"] = timer.rate(len(questions))

    encoder = vectors = None
    if args.model:
        from qres.encoders.runtime import Encoder

        encoder = Encoder.load(args.model)
        timer = Timer()
        tokens = encoder.tokenize(questions)
        stages["tokenise"] = timer.rate(len(questions))
        timer = Timer()
        vectors = np.concatenate(
            [
                encoder.encode_tokens(tokens[i : i + args.batch_size])
                for i in range(0, len(tokens), args.batch_size)
            ]
        )
        stages["encode"] = timer.rate(len(questions))
        del tokens

    backend = EmbeddedBackend(workdir / "stages", create=True)
    timer = Timer()
    terms = backend.analysis()(questions)  # what indexing's prepare stage works out
    stages["analyse"] = timer.rate(len(questions))
    timer = Timer()
    for i in range(0, len(questions), args.batch_size):
        rows = slice(i, i + args.batch_size)
        backend.upsert(questions[rows], None if vectors is None else vectors[rows], terms[rows])
    backend.commit()
    stages["write"] = timer.rate(len(questions))
    backend.close()
    del questions, terms, vectors

    # The same work with the stages one after another in one thread (how qres indexed before
    # the pipeline), then the pipeline: their ratio is the overlap gained on this machine.
    backend = EmbeddedBackend(workdir / "sequential", create=True)
    timer = Timer()
    batch: list = []
    for question in read_corpus(corpus):
        batch.append(question)
        if len(batch) == args.batch_size:
            backend.upsert(batch, encoder.encode_questions(batch) if encoder else None)
            batch = []
    backend.upsert(batch, encoder.encode_questions(batch) if encoder and batch else None)
    backend.commit()
    sequential = timer.rate(backend.count())
    backend.close()

    backend = EmbeddedBackend(workdir / "pipeline", create=True)
    timer = Timer()
    report = index_questions(
        backend, read_corpus(corpus), encoder, batch_size=args.batch_size, workers=args.workers
    )
    end_to_end = timer.rate(report.indexed)
    backend.close()
    return {
        "benchmark": "index_throughput",
        "machine": machine(),
        "corpus": {"questions": args.docs, "kind": "synthetic TSV, SemEval words"},
        "model": None if encoder is None else encoder.card.get("architecture"),
        "bulk_providers": None if encoder is None else encoder.providers,
        "batch_size": args.batch_size,
        "workers": default_workers() if args.workers is None else args.workers,
        "stages_alone": stages,
        "sequential_end_to_end": sequential,
        "end_to_end": end_to_end,
        "bound_on_idle_cores": round(
            (os.cpu_count() or 1)
            / sum(1 / stage["questions_per_cpu_s"] for stage in stages.values()),
            1,
        ),
        "pipeline_over_sequential": round(
            end_to_end["questions_per_s"] / sequential["questions_per_s"], 2
        ),
    }


if __name__ == "__main__":
    main()
