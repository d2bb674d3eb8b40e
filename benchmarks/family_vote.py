"""How deep a duplicate family votes, and with how much say, on a forum's train split, as JSON.

    python benchmarks/family_vote.py [--model DIR] [--split train] [--cache DIR]
        [--votes 0,0.25,0.5,0.75,1,2] [--voters 10,20,50,100] [--keep-links 1,0.3,0.1]

Search that follows a forum's duplicate links lets each question's family vote
(:mod:`qres.ranking.duplicates`): of the first ``VOTERS`` hits, each counts for the question
it leads to, which ranks by its best hit's score plus ``VOTE`` times how far each other hit
of its family scored above the lowest hit. This replays that choice on the dense ranking
alone, so that a sweep takes seconds: every question of the forum (``--data-dir``, default
the travel forum) is encoded once by ``--model`` (vectors cached under ``--cache``, keyed by
the model's fingerprint and the texts), mixed with its title as the model's card says; each
duplicate query of ``--split``, asked with its title alone and with its whole question, ranks
the whole forum by exact cosine (itself left out), and its top 200 go through
:func:`qres.ranking.duplicates.follow` itself, as of the date the query was closed, with
``VOTE`` and ``VOTERS`` set to each pair of the sweep (``VOTE`` 0 with one voter is the walk
before families voted: a hit's original in its place, in rank order). nDCG@10 as ``qres
evaluate --dataset stackexchange`` computes it.

``--keep-links`` asks what a forum with fewer links gets: a seeded share of the originals
keeps its links, every other duplicate stands as a question of its own (the query's own date
is kept). The travel forum holds only the questions that take part in links, which flatters
link following; most forums close a few percent of their questions.

The test split is never read unless asked for (``--split test``): choose on ``train``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.corpus.stackexchange import DUPLICATE_DATES, DUPLICATE_OF  # noqa: E402
from qres.datasets.forum_duplicates import load_forum_duplicates  # noqa: E402
from qres.encoders.runtime import Encoder  # noqa: E402
from qres.evaluation.ranking_metrics import ndcg_at  # noqa: E402
from qres.paths import home  # noqa: E402
from qres.ranking import duplicates  # noqa: E402
from qres.ranking.search import Result  # noqa: E402

DEPTH = 200  # each query's ranking handed to follow (deeper than any voters swept)


def vectors(encoder, questions, cache: Path) -> np.ndarray:
    """Each question's vector as the index stores it, cached by model and texts."""
    texts = [f"{q.title}\n{q.body}" for q in questions]
    key = hashlib.sha256("\0".join([encoder.fingerprint, *texts]).encode()).hexdigest()[:24]
    path = cache / f"family-vote-{key}.npy"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        np.save(path, encoder.encode_questions(questions))
    return np.load(path)


def stored(held: dict, ids) -> dict:
    """The questions of ``ids`` that ``held`` holds, by id (what a backend's fetch returns)."""
    return {i: held[i] for i in ids if i in held}


def keep_links(questions, share: float, seed: int = 0):
    """``questions`` with the links of only ``share`` of the originals (seeded)."""
    if share >= 1:
        return questions
    originals = sorted({o for q in questions for o in str(q.extras.get(DUPLICATE_OF, "")).split()})
    kept = set(random.Random(seed).sample(originals, round(share * len(originals))))
    thinned = []
    for q in questions:
        pairs = zip(
            str(q.extras.get(DUPLICATE_OF, "")).split(),
            str(q.extras.get(DUPLICATE_DATES, "")).split(),
            strict=True,
        )
        mine = [(o, d) for o, d in pairs if o in kept]
        extras = {k: v for k, v in q.extras.items() if k not in (DUPLICATE_OF, DUPLICATE_DATES)}
        if mine:
            extras[DUPLICATE_OF] = " ".join(o for o, _ in mine)
            extras[DUPLICATE_DATES] = " ".join(d for _, d in mine)
        thinned.append(replace(q, extras=extras))
    return thinned


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=home() / "models" / "minilm")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--split", default="train")
    parser.add_argument("--cache", type=Path, default=home() / "cache")
    parser.add_argument("--votes", default="0,0.25,0.5,0.75,1,2")
    parser.add_argument("--voters", default="10,20,50,100")
    parser.add_argument("--keep-links", default="1,0.3,0.1")
    args = parser.parse_args()
    started = time.perf_counter()
    forum = load_forum_duplicates(args.data_dir, args.split)
    corpus = list(forum.corpus())
    at = {q.id: i for i, q in enumerate(corpus)}
    encoder = Encoder.load(args.model)
    stored_vectors = vectors(encoder, corpus, args.cache)
    own = np.array([at[q.id] for q in forum.queries])
    asked = {
        "title": np.stack([encoder.encode_query(q.question.title) for q in forum.queries]),
        "question": stored_vectors[own],
    }
    cells = {}
    for share in [float(s) for s in args.keep_links.split(",")]:
        fetch = partial(stored, {q.id: q for q in keep_links(corpus, share)})
        for form, queries in asked.items():
            cosines = queries @ stored_vectors.T
            cosines[np.arange(len(own)), own] = -np.inf
            tops = np.argsort(-cosines, axis=1)[:, :DEPTH]
            runs = [
                [Result(corpus[i].id, float(row[i]), 0.0, float(row[i])) for i in top]
                for row, top in zip(cosines, tops, strict=True)
            ]
            walk = ndcg(forum, runs, fetch, 0.0, 1)
            for voters in [int(v) for v in args.voters.split(",")]:
                for vote in [float(v) for v in args.votes.split(",")]:
                    found = ndcg(forum, runs, fetch, vote, voters)
                    cells[f"keep {share} | {form} | voters {voters} | vote {vote}"] = {
                        "nDCG@10": round(found, 2),
                        "over the walk": round(found - walk, 2),
                    }
            cells[f"keep {share} | {form} | the walk"] = {"nDCG@10": round(walk, 2)}
            print(form, share, "walk", round(walk, 2), file=sys.stderr, flush=True)
    print(
        json.dumps(
            {
                "benchmark": "family_vote",
                "split": args.split,
                "queries": len(forum.queries),
                "questions": len(corpus),
                "model": str(args.model),
                "ranking": "dense, exact cosine, top 200 through duplicates.follow",
                "shipped": {"VOTERS": duplicates.VOTERS, "VOTE": duplicates.VOTE},
                "cells": cells,
                "seconds": round(time.perf_counter() - started, 1),
                "machine": machine(),
            },
            indent=1,
        )
    )


def ndcg(forum, runs, fetch, vote: float, voters: int) -> float:
    """Mean nDCG@10 (percent) of the runs followed with ``vote`` and ``voters``."""
    shipped = duplicates.VOTE, duplicates.VOTERS
    duplicates.VOTE, duplicates.VOTERS = vote, voters
    try:
        scores = []
        for q, run in zip(forum.queries, runs, strict=True):
            before = duplicates.first_closed(q.question.extras)
            shown, _ = duplicates.follow(run, fetch, 100, before)
            hits = [r.id in q.relevant for r in shown if r.id != q.id]
            scores.append(ndcg_at(hits, 10, len(q.relevant)))
    finally:
        duplicates.VOTE, duplicates.VOTERS = shipped
    return 100 * float(np.mean(scores))


if __name__ == "__main__":
    main()
