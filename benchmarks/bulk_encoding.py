"""Bulk encoding of transformer encoders: runs cut by a padded-token budget against runs of a
fixed number of texts padded to the longest (qres before the budget), as JSON.

    python benchmarks/bulk_encoding.py --model $QRES_HOME/models/minilm --corpus travel.jsonl
    python benchmarks/bulk_encoding.py --model DIR --corpus FILE --questions 500 --old-rows 32

Each (model, batching) pair runs in a fresh process, old and new one after the other in the
same run, tokenisation outside the timing: questions per second of
:meth:`TransformerEncoder.encode_tokens`, the process's peak resident memory (VmHWM, model
loading included) and the largest difference between the two batchings' vectors. The
corpus is any file ``qres index`` reads (e.g. a StackExchange dump converted to JSONL).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

OLD_BUDGET = 10**12  # no token bound: runs are cut by rows alone, as before


def peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(args) -> None:
    from qres.corpus.readers import read_corpus
    from qres.encoders.runtime import Encoder, Runtime

    budget = OLD_BUDGET if args.batching == "old" else 0
    encoder = Encoder.load(args.model, runtime=Runtime("cpu", token_budget=budget))
    questions = []
    for question in read_corpus(args.corpus):
        questions.append(question)
        if len(questions) == args.questions:
            break
    tokens = encoder.tokenize(questions)
    encoder.encode_tokens(tokens[:32])  # warm-up: the bulk session is made
    start = time.perf_counter()
    vectors = encoder.encode_tokens(tokens, args.old_rows if args.batching == "old" else None)
    seconds = time.perf_counter() - start
    np.save(args.vectors, vectors)
    print(
        json.dumps(
            {
                "questions": len(questions),
                "tokens": sum(len(t) for t, _ in tokens),
                "seconds": round(seconds, 2),
                "questions_per_s": round(len(questions) / seconds, 1),
                "peak_rss_mb": round(peak_rss_mb()),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, type=Path)
    parser.add_argument("--corpus", required=True, type=Path)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--old-rows", type=int, default=256, help="texts per run before")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--child", choices=["old", "new"], dest="batching", help=argparse.SUPPRESS)
    parser.add_argument("--vectors", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.batching:
        args.model = args.model[0]
        child(args)
        return

    result = {"machine": machine(), "corpus": str(args.corpus), "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.model:
            runs = {}
            for batching in ("old", "new"):
                vectors = Path(tmp) / f"{batching}.npy"
                command = [sys.executable, __file__, "--child", batching, "--model", str(model)]
                command += ["--corpus", str(args.corpus), "--questions", str(args.questions)]
                command += ["--old-rows", str(args.old_rows), "--vectors", str(vectors)]
                out = subprocess.run(command, capture_output=True, text=True, check=True)
                runs[batching] = json.loads(out.stdout)
                runs[batching]["load_average_1m_after"] = round(os.getloadavg()[0], 2)
            runs["old"]["batching"] = f"{args.old_rows} texts per run, padded to the longest"
            runs["new"]["batching"] = "padded-token budget (qres.encoders.runtime.TOKEN_BUDGET)"
            old, new = (np.load(Path(tmp) / f"{b}.npy") for b in ("old", "new"))
            runs["max_abs_vector_difference"] = float(np.abs(old - new).max())
            runs["speedup_new_over_old"] = round(
                runs["new"]["questions_per_s"] / runs["old"]["questions_per_s"], 2
            )
            runs["peak_rss_ratio_new_over_old"] = round(
                runs["new"]["peak_rss_mb"] / runs["old"]["peak_rss_mb"], 2
            )
            result["models"][model.name] = runs
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
