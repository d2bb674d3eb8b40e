"""Bulk encoding with one-thread runs side by side against one run at a time on all cores, as JSON.

    python benchmarks/runs_side_by_side.py --model DIR [--questions N] [--rounds 3] [--out FILE]

The first N questions of the travel forum are tokenised once and encoded whole by two
encoders of the same model on the CPU: qres's (bulk work in runs of one intra-op thread,
as many at once as there are cores) and the way a transformer ran them before 2026-11-29
(one session with an intra-op thread per core, one run after another). The two are taken
in turn in each round, so the machine's load falls on both alike: questions per second per
round, their medians, the ratio, and the largest difference between the two's vectors.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from itertools import islice
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402
from token_budget import rounds_in_turn  # noqa: E402

from qres.corpus.readers import read_corpus  # noqa: E402
from qres.datasets.forum_duplicates import forum_dir  # noqa: E402
from qres.encoders.runtime import Encoder, Runtime, _cores  # noqa: E402


def one_at_a_time(model: Path) -> Encoder:
    """An encoder whose bulk work runs on one session of a thread per core, a run at a time."""
    cores = _cores()
    encoder = Encoder.load(model, runtime=Runtime("cpu", query_threads=cores, bulk_threads=cores))
    encoder._make_bulk, encoder._parallel = None, 1  # bulk work on the query session, in turn
    return encoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--forum", type=Path, default=None)
    parser.add_argument("--questions", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    forum = read_corpus(forum_dir(args.forum) / "Posts.xml", "stackexchange")
    questions = list(islice(forum, args.questions))
    encoders = {
        "side_by_side": Encoder.load(args.model, runtime=Runtime("cpu")),
        "one_at_a_time": one_at_a_time(args.model),
    }
    tokens = encoders["side_by_side"].tokenize(questions)
    vectors = {name: e.encode_tokens(tokens) for name, e in encoders.items()}  # warm, compared
    rates = rounds_in_turn(encoders, tokens, args.rounds)
    medians = {name: statistics.median(r) for name, r in rates.items()}
    ratio = medians["side_by_side"] / medians["one_at_a_time"]
    difference = np.abs(vectors["side_by_side"] - vectors["one_at_a_time"]).max()
    report = {
        "benchmark": "runs_side_by_side",
        "machine": machine(),
        "model": args.model.name,
        "cores": _cores(),
        "questions": len(tokens),
        "questions_per_second": {
            name: {"rounds": r, "median": medians[name]} for name, r in rates.items()
        },
        "side_by_side_over_one_at_a_time": round(ratio, 3),
        "max_abs_vector_difference": float(difference),
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    json.dump(report, sys.stdout, indent=2)


if __name__ == "__main__":
    main()
