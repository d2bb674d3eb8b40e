"""Indexing throughput, stage by stage and end to end, in questions per second, as JSON.

    python benchmarks/index_throughput.py --docs 100000 [--model qres/models/default]

Writes a synthetic corpus (benchmarks/synthetic.py) to a TSV file, then times each stage of
``qres index`` alone on it — read (parse the TSV), tokenise (the encoder's token ids),
encode (onnxruntime on pre-tokenised batches), analyse (BM25 terms) and write (tantivy and
the vector file, terms and vectors given) — and finally the whole pipeline as ``qres
index`` runs it (:func:`qres.indexing.index_questions`), stages overlapping, right after the
same work done one stage after another in one thread. The stage figures say which stage
bounds the end-to-end rate on this machine.
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

from search_latency import machine  # noqa: E402
from synthetic import SyntheticForum  # noqa: E402

from qres.backends.embedded import EmbeddedBackend  # noqa: E402
from qres.corpus import read_corpus  # noqa: E402
from qres.indexing import default_workers, index_questions  # noqa: E402
from qres.paths import repo_shared_data  # noqa: E402
from qres.text import bm25_terms  # noqa: E402


def rate(n: int, seconds: float) -> dict:
    return {"seconds": round(seconds, 2), "questions_per_s": round(n / max(seconds, 1e-9), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--model", type=Path, help="model dir: also tokenise and encode")
    parser.add_argument("--batch-size", type=int, default=2048, help="questions per batch")
    parser.add_argument("--workers", type=int, help="prepare processes [default: auto]")
    parser.add_argument("--data-dir", type=Path, default=repo_shared_data())
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="qres-throughput-"))
    corpus = workdir / "corpus.tsv"
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("id\ttitle\tbody\n")
        for q in SyntheticForum(args.data_dir).questions(args.docs):
            f.write(f"{q.id}\t{q.title}\t{q.body}\n")

    stages = {}
    start = time.perf_counter()
    questions = list(read_corpus(corpus))
    stages["read"] = rate(len(questions), time.perf_counter() - start)

    encoder = vectors = None
    if args.model:
        from qres.encoder import Encoder

        encoder = Encoder.load(args.model)
        start = time.perf_counter()
        tokens = encoder.tokenize(questions)
        stages["tokenise"] = rate(len(questions), time.perf_counter() - start)
        start = time.perf_counter()
        vectors = np.concatenate(
            [
                encoder.encode_tokens(tokens[i : i + args.batch_size])
                for i in range(0, len(tokens), args.batch_size)
            ]
        )
        stages["encode"] = rate(len(questions), time.perf_counter() - start)
        del tokens

    backend = EmbeddedBackend(workdir / "stages", create=True)
    start = time.perf_counter()
    terms = [
        (bm25_terms(q.title, backend.analyzer), bm25_terms(q.body, backend.analyzer))
        for q in questions
    ]
    stages["analyse"] = rate(len(questions), time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(0, len(questions), args.batch_size):
        rows = slice(i, i + args.batch_size)
        backend.upsert(questions[rows], None if vectors is None else vectors[rows], terms[rows])
    backend.commit()
    stages["write"] = rate(len(questions), time.perf_counter() - start)
    backend.close()
    del questions, terms, vectors

    # The same work with the stages one after another in one thread (how qres indexed before
    # the pipeline), then the pipeline: their ratio is the overlap gained on this machine.
    backend = EmbeddedBackend(workdir / "sequential", create=True)
    start = time.perf_counter()
    batch: list = []
    for question in read_corpus(corpus):
        batch.append(question)
        if len(batch) == args.batch_size:
            backend.upsert(batch, encoder.encode_questions(batch) if encoder else None)
            batch = []
    backend.upsert(batch, encoder.encode_questions(batch) if encoder and batch else None)
    backend.commit()
    sequential = rate(backend.count(), time.perf_counter() - start)
    backend.close()

    backend = EmbeddedBackend(workdir / "pipeline", create=True)
    start = time.perf_counter()
    report = index_questions(
        backend, read_corpus(corpus), encoder, batch_size=args.batch_size, workers=args.workers
    )
    end_to_end = rate(report.indexed, time.perf_counter() - start)
    backend.close()
    print(
        json.dumps(
            {
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
                "pipeline_over_sequential": round(
                    end_to_end["questions_per_s"] / sequential["questions_per_s"], 2
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
