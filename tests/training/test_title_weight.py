"""qres adapt's choice of how much of a title alone its vectors mix in (training.title_weight)."""

from __future__ import annotations

import numpy as np
import pytest

from qres import Question
from qres.datasets.benchmarks import RankingQuery
from qres.training import title_weight

E1, E2, E3, E4 = np.eye(4, dtype=np.float32)


class FakeEncoder:
    """Each text's vector as given: a question's whole text and its title apart."""

    def __init__(self, vectors: dict[str, np.ndarray]):
        self.vectors = vectors

    def encode_texts(self, texts, progress=None):
        if progress:
            progress(len(texts))
        return np.stack([self.vectors[t] for t in texts])


def forum(texts: dict[str, tuple[np.ndarray, np.ndarray]]):
    """Questions whose bodies and titles the fake encoder reads as the vectors given, and
    the query "q", whose one original is "a"."""
    questions = [Question(id, f"title {id}", f"body {id}") for id in texts]
    vectors = {}
    for question, (whole, title) in zip(questions, texts.values(), strict=True):
        vectors[question.text], vectors[question.title] = whole, title
    query = RankingQuery("q", [], frozenset({"a"}), question=questions[0])
    return FakeEncoder(vectors), questions, [query]


def test_a_title_shared_with_the_original_is_mixed_in():
    # q's body reads as b's; its title as its original a's
    encoder, questions, queries = forum({"q": (E1, E3), "b": (E1, E4), "a": (E2, E3)})
    best, table = title_weight.choose(encoder, questions, queries, weights=(0.0, 0.3))
    assert best == 0.3
    hit_second = 100 / np.log2(3)  # nDCG@10 of the one original ranked second
    assert table[0.0] == {"question": round(hit_second, 2), "title": round(hit_second, 2)}
    assert table[0.3] == {"question": round(hit_second, 2), "title": 100.0}


def test_a_misleading_title_is_left_out():
    # q's body reads as a's; its title as b's
    encoder, questions, queries = forum({"q": (E1, E3), "a": (E1, E4), "b": (E2, E3)})
    best, table = title_weight.choose(encoder, questions, queries, weights=(0.0, 0.3))
    assert best == 0.0
    assert table[0.0] == {"question": 100.0, "title": 100.0}
    assert table[0.3]["title"] == pytest.approx(100 / np.log2(3), abs=0.01)


def test_a_tie_keeps_the_zero_shot_weight():
    encoder, questions, queries = forum({"q": (E1, E1), "a": (E1, E1), "b": (E2, E2)})
    best, table = title_weight.choose(encoder, questions, queries)
    assert len(set(map(str, table.values()))) == 1 and best == 0.2
