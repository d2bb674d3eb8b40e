"""The embedded backend: a tantivy index on disk plus a memory-mapped vector file.

Layout of an index directory::

    tantivy/        the BM25 index; documents store id, title, body, tags and a vector slot
    vectors.f16     (or .f32) row ``slot`` holds the vector of the document with that slot
    meta.json       index metadata: analyzer, title boost, model fingerprint, vector dims

Text is analysed in Python by :func:`qres.text.bm25_terms` (the same function search uses)
and handed to tantivy pre-split, so the engine never parses user text as query syntax.

Vectors are only ever appended: an upsert writes its rows at the end of the vector file and
records the new slot in the document. ``commit`` flushes the vector file before committing
tantivy, so a crash at any point leaves committed documents pointing at vectors that exist;
rows written after the last commit are unreferenced and harmless. Rows of replaced or
deleted documents stay unreferenced until ``qres index --rebuild`` writes a fresh index.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tantivy

from qres.backends.base import Backend, BackendError, Hit
from qres.corpus import Question
from qres.text import bm25_terms

ANALYZERS = ("english", "plain")
_TERMS_ANALYZER = "qres_terms"  # whitespace split of the terms qres.text already produced
_WRITER_HEAP = 128 * 1024 * 1024
_MAX_QUERY_TERMS = 1024  # a 10 kB query is still searched, by its first 1024 distinct terms


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    builder.add_text_field("title", stored=True, index_option="basic", tokenizer_name="raw")
    builder.add_text_field("body", stored=True, index_option="basic", tokenizer_name="raw")
    builder.add_text_field("tags", stored=True, tokenizer_name="raw")
    builder.add_text_field("title_terms", index_option="freq", tokenizer_name=_TERMS_ANALYZER)
    builder.add_text_field("body_terms", index_option="freq", tokenizer_name=_TERMS_ANALYZER)
    builder.add_integer_field("slot", stored=True, fast=True)
    return builder.build()


class EmbeddedBackend(Backend):
    name = "embedded"

    def __init__(self, path: str | Path, create: bool = False, **settings):
        """Open the index at ``path``; with ``create``, make it (``settings``: analyzer,
        title_boost, vector_dtype) if it does not exist yet."""
        self.path = Path(path)
        meta_path = self.path / "meta.json"
        if not meta_path.exists():
            if not create:
                raise BackendError(
                    f"no qres index at {self.path}: create one with `qres index CORPUS`"
                )
            self._init_dir(settings)
        try:
            self._meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise BackendError(f"{meta_path}: unreadable index metadata ({err})") from None
        self.analyzer = "english" if self._meta["analyzer"] == "english" else None
        self.title_boost = float(self._meta["title_boost"])
        self._dtype = np.dtype(self._meta["vector_dtype"])
        self._vector_path = self.path / (
            "vectors.f16" if self._dtype == np.float16 else "vectors.f32"
        )
        self._schema = _schema()
        self._index = tantivy.Index(self._schema, path=str(self.path / "tantivy"), reuse=True)
        self._index.register_tokenizer(
            _TERMS_ANALYZER, tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()
        )
        self._writer = None
        self._vector_file = None
        self._vectors: np.ndarray | None = None  # read-only memory map, reopened as it grows
        self._slot_of: dict[str, int] = {}

    def _init_dir(self, settings: dict) -> None:
        analyzer = settings.get("analyzer", "english")
        if analyzer not in ANALYZERS:
            raise BackendError(f"unknown analyzer {analyzer!r} (one of {', '.join(ANALYZERS)})")
        (self.path / "tantivy").mkdir(parents=True, exist_ok=True)
        self._write_meta(
            {
                "format": 1,
                "analyzer": analyzer,
                "title_boost": float(settings.get("title_boost", 2.0)),
                "vector_dtype": settings.get("vector_dtype", "float16"),
            }
        )

    def _write_meta(self, meta: dict) -> None:
        tmp = self.path / "meta.json.tmp"
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=True))
        os.replace(tmp, self.path / "meta.json")

    # -- writing -----------------------------------------------------------------------------

    def _get_writer(self):
        if self._writer is None:
            try:
                self._writer = self._index.writer(_WRITER_HEAP, 1)
            except ValueError as err:
                raise BackendError(
                    f"{self.path} is being written by another qres process ({err})"
                ) from None
        return self._writer

    def _next_slot(self) -> int:
        if self._vector_file is None:
            self._vector_file = open(self._vector_path, "ab")  # noqa: SIM115 - kept open
        return self._vector_file.tell() // self._row_bytes()

    def _row_bytes(self) -> int:
        return int(self._meta["vector_dim"]) * self._dtype.itemsize

    def upsert(self, questions: Sequence[Question], vectors: np.ndarray | None = None) -> None:
        writer = self._get_writer()
        slots = [-1] * len(questions)
        if vectors is not None:
            if len(vectors) != len(questions):
                raise ValueError(f"{len(questions)} questions but {len(vectors)} vectors")
            dim = self._meta.get("vector_dim")
            if dim is None:
                self.set_metadata({"vector_dim": int(vectors.shape[1])})
            elif vectors.shape[1] != dim:
                raise BackendError(
                    f"vectors have {vectors.shape[1]} dimensions but the index holds {dim}: "
                    "re-index with `qres index --rebuild`"
                )
            first = self._next_slot()
            self._vector_file.write(np.ascontiguousarray(vectors, dtype=self._dtype).tobytes())
            slots = list(range(first, first + len(questions)))
        for question, slot in zip(questions, slots, strict=True):
            writer.delete_documents_by_term("id", question.id)
            writer.add_document(
                tantivy.Document(
                    id=question.id,
                    title=question.title,
                    body=question.body,
                    tags=",".join(question.tags),
                    title_terms=" ".join(bm25_terms(question.title, self.analyzer)),
                    body_terms=" ".join(bm25_terms(question.body, self.analyzer)),
                    slot=slot,
                )
            )

    def delete(self, ids: Sequence[str]) -> None:
        writer = self._get_writer()
        for qid in ids:
            writer.delete_documents_by_term("id", qid)

    def commit(self) -> None:
        if self._vector_file is not None:
            self._vector_file.flush()
            os.fsync(self._vector_file.fileno())
        if self._writer is not None:
            self._writer.commit()
            self._writer.wait_merging_threads()
            self._writer = None
        self._index.reload()
        self._slot_of.clear()

    def rollback(self) -> None:
        """Drop everything written since the last commit."""
        if self._writer is not None:
            self._writer.rollback()

    # -- reading -----------------------------------------------------------------------------

    def _query(self, text: str) -> tantivy.Query | None:
        terms = list(dict.fromkeys(bm25_terms(text, self.analyzer)))[:_MAX_QUERY_TERMS]
        if not terms:
            return None
        clauses = []
        for term in terms:
            title = tantivy.Query.term_query(self._schema, "title_terms", term)
            clauses.append(
                (tantivy.Occur.Should, tantivy.Query.boost_query(title, self.title_boost))
            )
            body = tantivy.Query.term_query(self._schema, "body_terms", term)
            clauses.append((tantivy.Occur.Should, body))
        return tantivy.Query.boolean_query(clauses)

    def search(self, text: str, k: int, only_ids: Sequence[str] | None = None) -> list[Hit]:
        query = self._query(text)
        if only_ids is not None:
            allowed = tantivy.Query.term_set_query(self._schema, "id", list(only_ids))
            clauses = [(tantivy.Occur.Must, tantivy.Query.const_score_query(allowed, 0.0))]
            if query is not None:
                clauses.append((tantivy.Occur.Should, query))
            query = tantivy.Query.boolean_query(clauses)
        if query is None or k <= 0:
            return []
        searcher = self._index.searcher()
        result = searcher.search(query, k, count=False)
        addresses = [addr for _, addr in result.hits]
        ids = [searcher.doc(addr)["id"][0] for addr in addresses]
        # Remember the hits' vector slots (a fast-field read) so the rescoring step that
        # follows a search needs no second lookup. Slots are append-only, so a remembered
        # slot always holds the vector its document had in this searcher's snapshot.
        if len(self._slot_of) > 100_000:
            self._slot_of.clear()
        self._slot_of.update(zip(ids, searcher.fast_field_values("slot", addresses), strict=True))
        return [Hit(qid, score) for qid, (score, _) in zip(ids, result.hits, strict=True)]

    def _docs(self, ids: Sequence[str]) -> dict[str, dict]:
        if not ids:
            return {}
        searcher = self._index.searcher()
        query = tantivy.Query.term_set_query(self._schema, "id", list(ids))
        result = searcher.search(query, len(set(ids)), count=False)
        docs = (searcher.doc(addr).to_dict() for _, addr in result.hits)
        return {doc["id"][0]: doc for doc in docs}

    def fetch(self, ids: Sequence[str]) -> dict[str, Question]:
        return {
            qid: Question(
                qid,
                doc["title"][0],
                doc["body"][0],
                tuple(t for t in doc["tags"][0].split(",") if t),
            )
            for qid, doc in self._docs(ids).items()
        }

    def _vector_rows(self, needed: int) -> np.ndarray:
        if self._vectors is None or len(self._vectors) < needed:
            size = self._vector_path.stat().st_size if self._vector_path.exists() else 0
            rows = size // self._row_bytes()
            dim = int(self._meta["vector_dim"])
            self._vectors = (
                np.memmap(self._vector_path, self._dtype, "r", shape=(rows, dim))
                if rows
                else np.zeros((0, dim), self._dtype)
            )
        return self._vectors

    def vectors(self, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        dim = self._meta.get("vector_dim")
        if dim is None:
            return np.zeros((len(ids), 0), np.float32), np.zeros(len(ids), bool)
        unknown = [q for q in ids if q not in self._slot_of]
        if unknown:
            docs = self._docs(unknown)
            self._slot_of.update({q: doc["slot"][0] for q, doc in docs.items()})
        slots = np.array([self._slot_of.get(q, -1) for q in ids], np.int64)
        store = self._vector_rows(int(slots.max(initial=-1)) + 1)
        have = (slots >= 0) & (slots < len(store))
        out = np.zeros((len(ids), dim), np.float32)
        out[have] = store[slots[have]]
        return out, have

    def count(self) -> int:
        return self._index.searcher().num_docs

    def metadata(self) -> dict:
        return dict(self._meta)

    def set_metadata(self, values: dict) -> None:
        self._meta.update(values)
        self._write_meta(self._meta)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.rollback()
            self._writer = None
        if self._vector_file is not None:
            self._vector_file.close()
            self._vector_file = None
        self._vectors = None
