"""Whether a question's body cut into passages helps a title find it, as JSON.

    python benchmarks/title_passages.py --model DIR [--words 80] [--split train]

MiniLM reads a question as one text (title and body) cut to its token limit. Here each
question is also read as passages: its title with one window of ``--words`` words of its body
(a question of at most that many words is one passage, its whole text). Each duplicate of the
split asks with its title and with its whole question (mixed with its title at the card's
0.2, as indexing does) and ranks the whole forum by exact cosine against: the whole text
(what is stored today), the best of its passages (MaxP), the mean of its passages' vectors
(one vector, as the store holds), and weighted sums of the whole text's cosine and the best
passage's. Each vector of a question is mixed with its title alone at 0.2. Dense ranking,
text alone (links not followed); nDCG@10 and R@100 as ``benchmarks/title_weight.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.corpus.readers import read_corpus  # noqa: E402
from qres.datasets.forum_duplicates import load_forum_duplicates  # noqa: E402
from qres.encoders.runtime import Encoder  # noqa: E402
from qres.training.import_encoder import TITLE_WEIGHT  # noqa: E402
from qres.training.title_weight import scores, unit  # noqa: E402


def passages(questions, words: int) -> tuple[list[str], np.ndarray]:
    """Each question's title with each window of its body; and the question each belongs to."""
    texts, owner = [], []
    for at, question in enumerate(questions):
        body = (question.body or "").split()
        windows = [" ".join(body[i : i + words]) for i in range(0, len(body), words)]
        for window in windows or [""]:
            texts.append(f"{question.title}\n{window}" if window else question.text)
            owner.append(at)
    return texts, np.array(owner)


def best_passage(asked: np.ndarray, vectors: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    cosines = asked @ vectors.T
    best = np.full((n, len(asked)), -np.inf, dtype=np.float32)
    np.maximum.at(best, owner, cosines.T)
    return best.T


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--words", type=int, default=80)
    parser.add_argument("--split", choices=("train", "test"), default="train")
    args = parser.parse_args(argv)
    forum = load_forum_duplicates(args.data_dir, args.split)
    questions = list(read_corpus(forum.posts, "stackexchange"))
    at = {q.id: i for i, q in enumerate(questions)}
    encoder = Encoder.load(args.model)
    started = time.perf_counter()
    texts = encoder.encode_texts([q.text for q in questions])
    titles = encoder.encode_texts([q.title or q.text for q in questions])
    passage_texts, owner = passages(questions, args.words)
    passage_vectors = encoder.encode_texts(passage_texts)
    encode_s = round(time.perf_counter() - started, 1)
    whole = unit((1 - TITLE_WEIGHT) * texts + TITLE_WEIGHT * titles)
    parts = unit((1 - TITLE_WEIGHT) * passage_vectors + TITLE_WEIGHT * titles[owner])
    summed = np.zeros_like(texts)
    np.add.at(summed, owner, passage_vectors)
    mean_of_parts = unit((1 - TITLE_WEIGHT) * unit(summed) + TITLE_WEIGHT * titles)
    own = [at[q.id] for q in forum.queries]
    relevant = [{at[r] for r in q.relevant} for q in forum.queries]
    results = {}
    for form in ("title", "question"):
        asked = titles[own] if form == "title" else whole[own]
        today = asked @ whole.T
        best = best_passage(asked, parts, owner, len(questions))
        cells = {
            "whole text (today)": today,
            "best passage": best,
            "mean of the passages' vectors": asked @ mean_of_parts.T,
            "max(whole text, best passage)": np.maximum(today, best),
        }
        for a in (0.3, 0.5, 0.7):
            cells[f"{1 - a:.1f} whole text + {a:.1f} best passage"] = (1 - a) * today + a * best
        results[form] = {name: scores(c, own, relevant) for name, c in cells.items()}
    report = {
        "benchmark": "title_passages",
        "forum": str(forum.posts.parent),
        "split": args.split,
        "queries": len(own),
        "questions": len(questions),
        "model": str(args.model),
        "words_per_passage": args.words,
        "passages": len(passage_texts),
        "encode_seconds": encode_s,
        "by_query_form": results,
        "machine": machine(),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
