"""How much of a question's title alone to mix into a transformer's vector, as JSON.

    python benchmarks/title_weight.py --model DIR [--model DIR ...] [--weights 0,0.1,0.2]
        [--query question|title|both] [--held-out]

Every question of a forum (``--data-dir``, default the travel forum) is encoded twice by each
model: its whole text (title and body as one text, as the model was trained) and its title
alone. A question's vector at title weight w is normalise((1 − w) · v(text) + w · v(title)),
what ``qres import-encoder`` writes as ``title_weight`` (:mod:`qres.encoders.runtime`); w = 0 is
the whole text alone. Each duplicate query (its title and body, mixed the same way) ranks the
whole forum by cosine, exactly (its own id left out); with ``--query title`` it asks with its
title alone instead (what a widget sends). nDCG@10 and R@100 are as ``qres evaluate --dataset
stackexchange`` computes them, for each split, so a weight can be chosen on ``train`` and read
on ``test``; ``--held-out`` adds ``held-out``, the train split's newest tenth, which ``qres
adapt`` holds out of fine-tuning to fit its fusion on. With several models, ``together``
ranks by the mean of their cosines. Dense ranking only: the fused hybrid is measured by
``qres evaluate``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.corpus.readers import read_corpus  # noqa: E402
from qres.datasets.forum_duplicates import held_out_cut, load_forum_duplicates  # noqa: E402
from qres.encoders.runtime import Encoder, TransformerEncoder  # noqa: E402
from qres.training.title_weight import cosines, scores  # noqa: E402

SPLITS = ("train", "test")


def ranked(text_vectors, title_vectors, w, form, own, relevant, models) -> dict:
    """Each model's scores (and ``together``'s) at title weight ``w``, asking with ``form``."""
    each = [
        cosines(texts, titles, w, form, own)
        for texts, titles in zip(text_vectors, title_vectors, strict=True)
    ]
    row = {d.name: scores(c, own, relevant) for d, c in zip(models, each, strict=True)}
    if len(each) > 1:
        row["together"] = scores(np.mean(each, axis=0), own, relevant)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, action="append", required=True)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--weights", default="0,0.1,0.2,0.3,0.4,0.5", help="comma-separated")
    parser.add_argument("--query", choices=("question", "title", "both"), default="question")
    parser.add_argument("--held-out", action="store_true", help="also the held-out tenth")
    args = parser.parse_args(argv)
    weights = [float(w) for w in args.weights.split(",")]
    forms = ("question", "title") if args.query == "both" else (args.query,)
    splits = {s: load_forum_duplicates(args.data_dir, s) for s in SPLITS}
    if args.held_out:
        train = splits["train"]
        held = train.queries[held_out_cut(len(train.queries)) :]
        splits["held-out"] = replace(train, queries=held)
    questions = list(read_corpus(splits["train"].posts, "stackexchange"))
    at = {q.id: i for i, q in enumerate(questions)}
    encoders = [Encoder.load(d) for d in args.model]
    for d, encoder in zip(args.model, encoders, strict=True):
        if not isinstance(encoder, TransformerEncoder):
            parser.error(f"{d}: not a transformer model directory")
    text_vectors, title_vectors, seconds = [], [], {}
    for d, encoder in zip(args.model, encoders, strict=True):
        started = time.perf_counter()
        # encode_texts reads each text as a title without a body: never mixed
        text_vectors.append(encoder.encode_texts([q.text for q in questions]))
        title_vectors.append(encoder.encode_texts([q.title or q.text for q in questions]))
        seconds[d.name] = round(time.perf_counter() - started, 1)
    by_form: dict[str, dict] = {}
    for form in forms:
        results = by_form[form] = {}
        for split, forum in splits.items():
            own = [at[q.id] for q in forum.queries]
            relevant = [{at[r] for r in q.relevant} for q in forum.queries]
            per_weight = {
                str(w): ranked(text_vectors, title_vectors, w, form, own, relevant, args.model)
                for w in weights
            }
            results[split] = {"queries": len(own), "by_title_weight": per_weight}
    print(
        json.dumps(
            {
                "benchmark": "title_weight",
                "forum": str(splits["train"].posts.parent),
                "questions": len(questions),
                "models": [str(d) for d in args.model],
                "query": args.query,
                "encode_seconds": seconds,
                **({"splits": by_form[forms[0]]} if len(forms) == 1 else {"forms": by_form}),
                "machine": machine(),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
