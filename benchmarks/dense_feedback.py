"""Dense pseudo-relevance feedback for title queries, measured and not kept, as JSON.

    python benchmarks/dense_feedback.py [--forum DIR] [--out FILE]

A title is a short query; feedback moves its vector towards the questions it finds first:
q' = normalise(q + beta * mean of the m nearest questions' vectors), then every question is
ranked again by its cosine to q'. Each duplicate of the travel forum's **train** split (the
test split is never read) searches the whole forum by exact cosine with the `minilm` set's
model, its own question left out, on the text alone (links not followed), once with its
title and once with its whole question (its stored vector); nDCG@10 for each m and beta.
The vectors are those of the evaluation index `qres evaluate` fills (made if missing).
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
from qres.evaluation.rankers import ensure_index, open_eval_index  # noqa: E402
from qres.evaluation.ranking_metrics import ndcg_at  # noqa: E402
from qres.evaluation.runner import eval_index_name, load_benchmark  # noqa: E402

NEAREST = (1, 3, 5, 10)
BETAS = (0.1, 0.2, 0.3, 0.5)


def ndcg10(scores: np.ndarray, queries, ids: list[str]) -> float:
    """Mean nDCG@10 of each query's row of ``scores`` over every question."""
    total = 0.0
    for row, query in zip(scores, queries, strict=True):
        top = np.argpartition(-row, 10)[:10]
        top = top[np.argsort(-row[top])]
        total += ndcg_at([ids[t] in query.relevant for t in top], 10, len(query.relevant))
    return round(100 * total / len(queries), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--forum", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    forum = load_benchmark("stackexchange", "train", args.forum, links=False)
    ids = [q.id for q in forum.corpus()]
    row_of = {qid: i for i, qid in enumerate(ids)}
    (model_dir,) = model_set.model_dirs("minilm")
    encoder = Encoder.load(model_dir)
    with open_eval_index(None, eval_index_name(forum, encoder.fingerprint[:16])) as index:
        ensure_index(index, forum.corpus, encoder)  # the index qres evaluate fills
        vectors, present = index.vectors(ids)
    assert present.all(), "every question of the forum has a vector"
    own = np.array([row_of[q.id] for q in forum.queries])
    forms = {
        "title": np.stack([encoder.encode_query(q.question.title) for q in forum.queries]),
        "question": vectors[own],
    }
    table: dict = {}
    for form, query_vectors in forms.items():

        def ranked(q: np.ndarray) -> np.ndarray:
            scores = q @ vectors.T
            scores[np.arange(len(own)), own] = -np.inf  # a query never finds itself
            return scores

        first = ranked(query_vectors)
        cells = {"no feedback": ndcg10(first, forum.queries, ids)}
        for m in NEAREST:
            nearest = np.argpartition(-first, m, axis=1)[:, :m]
            for beta in BETAS:
                moved = query_vectors + beta * vectors[nearest].mean(axis=1)
                moved /= np.linalg.norm(moved, axis=1, keepdims=True)
                cells[f"m={m}, beta={beta}"] = ndcg10(ranked(moved), forum.queries, ids)
        table[form] = cells
    report = {
        "benchmark": "dense_feedback",
        "machine": machine(),
        "forum": str(forum.folder),
        "split": "train (the test split is not read)",
        "queries": len(forum.queries),
        "model": model_dir.name,
        "ranking": "exact cosine over the whole forum, text alone",
        "nDCG@10": table,
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
