"""What a document of the tantivy index holds, and how text becomes its terms.

The text is stored once: title, body and tags as stored-only bytes, searched through the
analysed terms of ``title_terms``/``body_terms`` (indexed, not stored). Only ``id`` is
indexed as a whole (for replacing and restricting by id), and ``slot`` is a fast field, so
the query path ranks without touching the document store. ``extras`` (what a forum shows
beside a question: answer count, score, ...) is a stored-only JSON object, in documents that
have any; an index made before qres stored extras has no such field (tantivy cannot add one
to an index): :func:`fields_of` tells, and such an index reads as having none.
``closed``, a fast field, marks a question closed as a duplicate (its extras name its
originals), so that search follows duplicate links reading only those hits' documents; an
index made before it, or a document an older qres wrote, has no mark and its hits are read.
``title_words`` indexes each title's words as typed (normalised, not stemmed), whose counts
complete a first word being typed; an index made before it completes none.

Text is analysed in Python by :func:`qres.text.bm25_terms` (the same function search uses)
and handed to tantivy pre-split, so the engine never parses user text as query syntax.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from pathlib import Path

import tantivy

from qres.backends.base import BackendError
from qres.corpus.duplicate_links import names_originals
from qres.corpus.readers import Question
from qres.text import bm25_terms, words

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
    builder.add_text_field("title_words", index_option="basic", tokenizer_name=TERMS_ANALYZER)
    builder.add_integer_field("slot", stored=True, fast=True)
    builder.add_bytes_field("extras", stored=True)  # a JSON object, UTF-8, stored only
    builder.add_boolean_field("closed", fast=True)
    return builder.build()


_TERM_SET_FROM = 100  # ids from which tantivy's term set query beats a term query per id


def id_query(index_schema: tantivy.Schema, ids: Sequence[str]) -> tantivy.Query:
    """The query matching the documents of ``ids``: one term query per id (at 10 ids ~6x
    faster than tantivy's term set query, whose cost starts at ~0.3 ms), the term set query
    from :data:`_TERM_SET_FROM` ids on."""
    ids = list(dict.fromkeys(ids))
    if len(ids) >= _TERM_SET_FROM:
        return tantivy.Query.term_set_query(index_schema, "id", ids)
    terms = [tantivy.Query.term_query(index_schema, "id", i) for i in ids]
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, t) for t in terms])


def fields_of(engine: Path) -> set[str]:
    """The names of the fields of the tantivy index in ``engine`` (its meta.json's schema)."""
    path = engine / "meta.json"
    try:
        return {field["name"] for field in json.loads(path.read_text())["schema"]}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        raise BackendError(f"{path}: unreadable tantivy metadata ({err})") from None


def document(
    question: Question, terms: tuple[str, str, str], slot: int, fields_held: Collection[str]
) -> tantivy.Document:
    """The tantivy document of ``question`` (``terms``: :func:`analyze`'s for it) in an index
    of ``fields_held`` (:func:`fields_of`: older indexes lack ``extras``, ``closed`` and
    ``title_words``)."""
    fields = {
        "id": question.id,
        "title": question.title.encode(),
        "body": question.body.encode(),
        "tags": ",".join(question.tags).encode(),
        "title_terms": terms[0],
        "body_terms": terms[1],
        "slot": slot,
    }
    with_extras = "extras" in fields_held
    if with_extras and question.extras:
        extras = json.dumps(dict(question.extras), ensure_ascii=False, separators=(",", ":"))
        fields["extras"] = extras.encode()
    if "closed" in fields_held:
        fields["closed"] = with_extras and names_originals([question])
    if "title_words" in fields_held:
        fields["title_words"] = terms[2]
    return tantivy.Document(**fields)


def analyze(questions: Sequence[Question], analyzer: str | None) -> list[tuple[str, str, str]]:
    """The title and body terms and the title's words of each question, space-joined as
    tantivy takes them (worked out with the rest of indexing's preparation, in its worker
    processes where it has them, not in the writer)."""
    return [
        (
            " ".join(bm25_terms(q.title, analyzer)),
            " ".join(bm25_terms(q.body, analyzer)),
            " ".join(words(q.title)),
        )
        for q in questions
    ]


def question_of(qid: str, doc: dict) -> Question:
    """A question from its stored fields (title, body, tags and extras are UTF-8 bytes)."""
    tags = tuple(t for t in doc["tags"][0].decode().split(",") if t)
    extras = json.loads(doc["extras"][0]) if doc.get("extras") else {}
    return Question(qid, doc["title"][0].decode(), doc["body"][0].decode(), tags, extras)
