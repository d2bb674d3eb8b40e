"""What a document of the tantivy index holds, and how text becomes its terms.

The text is stored once: title, body and tags as stored-only bytes, searched through the
analysed terms of ``title_terms``/``body_terms`` (indexed, not stored). Only ``id`` is
indexed as a whole (for replacing and restricting by id), and ``slot`` is a fast field, so
the query path ranks without touching the document store.

Text is analysed in Python by :func:`qres.text.bm25_terms` (the same function search uses)
and handed to tantivy pre-split, so the engine never parses user text as query syntax.
"""

from __future__ import annotations

from collections.abc import Sequence

import tantivy

from qres.corpus.readers import Question
from qres.text import bm25_terms

ANALYZERS = ("english", "plain")
TERMS_ANALYZER = "qres_terms"  # whitespace split of the terms qres.text already produced


def schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, index_option="basic", tokenizer_name="raw")
    builder.add_bytes_field("title", stored=True)  # UTF-8, stored only
    builder.add_bytes_field("body", stored=True)
    builder.add_bytes_field("tags", stored=True)  # comma-separated
    builder.add_text_field("title_terms", index_option="freq", tokenizer_name=TERMS_ANALYZER)
    builder.add_text_field("body_terms", index_option="freq", tokenizer_name=TERMS_ANALYZER)
    builder.add_integer_field("slot", stored=True, fast=True)
    return builder.build()


def analyze(questions: Sequence[Question], analyzer: str | None) -> list[tuple[str, str]]:
    """The title and body terms of each question, space-joined as tantivy takes them."""
    return [
        (" ".join(bm25_terms(q.title, analyzer)), " ".join(bm25_terms(q.body, analyzer)))
        for q in questions
    ]


def question_of(qid: str, doc: dict) -> Question:
    """A question from its stored fields (title, body and tags are UTF-8 bytes)."""
    tags = tuple(t for t in doc["tags"][0].decode().split(",") if t)
    return Question(qid, doc["title"][0].decode(), doc["body"][0].decode(), tags)
