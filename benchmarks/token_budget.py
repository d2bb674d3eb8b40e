"""Bulk encoding speed by token budget (padded tokens per onnxruntime run), as JSON.

    python benchmarks/token_budget.py --model DIR [--questions N] [--budgets 512,1024,4096]
        [--rounds 3] [--out FILE]

The first N questions of the travel forum are tokenised once and encoded whole by one
encoder per budget (:class:`qres.encoders.runtime.Runtime`'s ``token_budget``, what
``$QRES_TOKEN_BUDGET`` sets), the budgets taken in turn in each round so that the machine's
load falls on all of them alike; questions per second per round and their median.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.corpus.readers import read_corpus  # noqa: E402
from qres.datasets.forum_duplicates import forum_dir  # noqa: E402
from qres.encoders.runtime import Encoder, Runtime  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--forum", type=Path, default=None)
    parser.add_argument("--questions", type=int, default=1024)
    parser.add_argument("--budgets", default="512,1024,2048,4096")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    posts = forum_dir(args.forum) / "Posts.xml"
    questions = []
    for question in read_corpus(posts, "stackexchange"):
        questions.append(question)
        if len(questions) == args.questions:
            break
    budgets = [int(b) for b in args.budgets.split(",")]
    runtime = Runtime.from_env("cpu")
    encoders = {
        b: Encoder.load(args.model, runtime=dataclasses.replace(runtime, token_budget=b))
        for b in budgets
    }
    tokens = encoders[budgets[0]].tokenize(questions)
    for encoder in encoders.values():  # sessions made and warm before any is timed
        encoder.encode_tokens(tokens[:64])
    rates = rounds_in_turn(encoders, tokens, args.rounds)
    report = {
        "benchmark": "token_budget",
        "machine": machine(),
        "model": args.model.name,
        "max_tokens": encoders[budgets[0]].max_tokens,
        "questions": len(tokens),
        "questions_per_second": {
            str(b): {"rounds": r, "median": statistics.median(r)} for b, r in rates.items()
        },
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


def rounds_in_turn(encoders: dict, tokens: list, rounds: int) -> dict[object, list[float]]:
    """Questions per second of each encoder encoding ``tokens`` whole, the encoders taken in
    turn in each of ``rounds`` so that the machine's load falls on all of them alike."""
    rates: dict[object, list[float]] = {key: [] for key in encoders}
    for _ in range(rounds):
        for key, encoder in encoders.items():
            start = time.perf_counter()
            encoder.encode_tokens(tokens)
            rates[key].append(round(len(tokens) / (time.perf_counter() - start), 1))
    return rates


if __name__ == "__main__":
    main()
