"""A deterministic stand-in for qres.encoders.runtime.Encoder, for tests of the query path.

It maps each question to a fixed unit vector by a word → direction table, so a test can
state which questions a query is "semantically" close to, independent of word overlap.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qres.text import tokenize


class TableEncoder:
    def __init__(self, directions: dict[str, int], dim: int = 4, fingerprint: str = "fake-model"):
        self.directions, self.dim, self.fingerprint = directions, dim, fingerprint
        self.model_dir = Path("/nonexistent/fake-model")
        self.calls = 0

    def _vector(self, text: str) -> np.ndarray:
        v = np.full(self.dim, 1e-3, np.float32)
        for token in tokenize(text):
            if token in self.directions:
                v[self.directions[token]] += 1.0
        return v / np.linalg.norm(v)

    def encode_query(self, text: str) -> np.ndarray:
        self.calls += 1
        return self._vector(text)

    def encode_questions(self, questions) -> np.ndarray:
        return np.stack([self._vector(f"{q.title} {q.body}") for q in questions])

    # The bulk interface indexing uses: tokenizer() (picklable) feeds encode_tokens.
    def tokenizer(self):
        return _texts

    def encode_tokens(self, texts, batch_size: int = 256, progress=None) -> np.ndarray:
        vectors = np.stack([self._vector(text) for text in texts])
        if progress:
            progress(len(texts))
        return vectors


def _texts(questions) -> list[str]:
    return [f"{q.title} {q.body}" for q in questions]


def schema_of_an_older_qres(closed_mark: bool):
    """The embedded index's tantivy schema as a qres before the titles' words wrote it
    (``title_words``), and before the closed mark too unless ``closed_mark``."""
    import tantivy

    from qres.backends.embedded.documents import TERMS_ANALYZER

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, index_option="basic", tokenizer_name="raw")
    for name in ("title", "body", "tags"):
        builder.add_bytes_field(name, stored=True)
    for name in ("title_terms", "body_terms"):
        builder.add_text_field(name, index_option="freq", tokenizer_name=TERMS_ANALYZER)
    builder.add_integer_field("slot", stored=True, fast=True)
    builder.add_bytes_field("extras", stored=True)
    if closed_mark:
        builder.add_boolean_field("closed", fast=True)
    return builder.build()
