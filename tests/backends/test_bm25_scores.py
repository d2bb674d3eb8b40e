"""The embedded backend's BM25 scores against a computation from the formula.

qres scores a query as the sum over its distinct terms of title boost x BM25 in the title
field + BM25 in the body field, each field with its own document frequencies and average
length (tantivy: k1 1.2, b 0.75, idf ln(1 + (N - n + 0.5) / (n + 0.5)), and a document's
field length stored in one byte: exact up to 40 terms, then rounded down to a bucket).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from pathlib import Path

import pytest

from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import Question, read_corpus
from qres.text import bm25_terms

DEMO = Path(__file__).resolve().parents[2] / "qres" / "data" / "demo" / "questions.tsv"
QUERIES = ["usb boot", "wifi not working after upgrade", "install nvidia driver", "sound"]


def stored_lengths() -> list[int]:
    """The field lengths a one-byte field norm can hold: 0-40, then 8 steps of 2, 8 of 4..."""
    lengths, step = list(range(41)), 2
    while len(lengths) < 256:
        lengths += [lengths[-1] + step * i for i in range(1, 9)]
        step *= 2
    return lengths


def reference_scores(questions, text: str, title_boost: float) -> dict[str, float]:
    table, n = stored_lengths(), len(questions)
    scores: Counter = Counter()
    for field, boost in (("title", title_boost), ("body", 1.0)):
        terms = [Counter(bm25_terms(getattr(q, field))) for q in questions]
        average = sum(sum(t.values()) for t in terms) / n
        for term in dict.fromkeys(bm25_terms(text)):
            holders = [(q.id, t) for q, t in zip(questions, terms, strict=True) if term in t]
            idf = math.log(1 + (n - len(holders) + 0.5) / (len(holders) + 0.5))
            for qid, t in holders:
                length = table[bisect.bisect_right(table, sum(t.values())) - 1]
                tf = t[term]
                norm = 1.2 * (0.25 + 0.75 * length / average)
                scores[qid] += boost * idf * tf * 2.2 / (tf + norm)
    return scores


@pytest.mark.parametrize("title_boost", [2.0, 3.5])
def test_scores_and_ranking_follow_the_formula(tmp_path, title_boost):
    questions = list(read_corpus(DEMO))
    # long bodies (several demo bodies joined), whose lengths the index rounds
    questions += [
        Question(f"long{i}", q.title, " ".join(p.body for p in questions[i : i + 3 + i % 20]))
        for i, q in enumerate(questions[:60])
    ]
    assert sum(len(bm25_terms(q.body)) > 40 for q in questions) > 30
    backend = EmbeddedBackend(tmp_path / "index", create=True, title_boost=title_boost)
    backend.upsert(questions)
    backend.commit()
    k = 20
    for text in QUERIES:
        want = reference_scores(questions, text, title_boost)
        hits = backend.search(text, k)
        assert len(hits) == min(k, len(want))
        for hit in hits:
            assert hit.score == pytest.approx(want[hit.id], rel=1e-5)
        # Documents that tie at the k-th score may be cut either way; all above it are in.
        kth = sorted(want.values(), reverse=True)[len(hits) - 1]
        above = {qid for qid, score in want.items() if score > kth * (1 + 1e-5)}
        assert above <= {h.id for h in hits}
    backend.close()
