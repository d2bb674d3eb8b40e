"""A synthetic forum corpus whose word frequencies and lengths follow the SemEval data.

Words are drawn from the unigram distribution of the SemEval-2016 related questions, and
title/body lengths from their empirical length distributions, so BM25 posting lists have a
realistic Zipf shape. Queries are drawn the same way from the original questions' titles.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from qres.corpus.readers import Question
from qres.datasets.benchmarks import dataset_dir, load_semeval, semeval_questions
from qres.text import tokenize


class SyntheticForum:
    def __init__(self, data_dir: Path, seed: int = 0):
        folder = dataset_dir("semeval2016", data_dir)
        questions = list(semeval_questions(folder))
        words = Counter(t for q in questions for t in tokenize(q.text) if t[0].isalnum())
        self.vocab = np.array(list(words))
        counts = np.array(list(words.values()), dtype=float)
        self.p = counts / counts.sum()
        self.title_lengths = np.array([max(1, len(tokenize(q.title))) for q in questions])
        self.body_lengths = np.array([len(tokenize(q.body)) for q in questions])
        self.queries = [q.question.title for q in load_semeval(folder, "dev").queries]
        self.rng = np.random.default_rng(seed)

    def _text(self, n: int) -> str:
        return " ".join(self.vocab[self.rng.choice(len(self.vocab), n, p=self.p)])

    def questions(self, n: int) -> Iterator[Question]:
        for i in range(n):
            title = self._text(int(self.rng.choice(self.title_lengths)))
            body = self._text(int(self.rng.choice(self.body_lengths)))
            yield Question(f"s{i}", title, body)

    def query_texts(self, n: int) -> list[str]:
        """Real question titles (SemEval dev) and synthetic 3-8 word queries, half each."""
        real = [self.queries[i % len(self.queries)] for i in range(n // 2)]
        synthetic = [self._text(int(self.rng.integers(3, 9))) for _ in range(n - len(real))]
        return real + synthetic
