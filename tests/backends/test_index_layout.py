"""The embedded index's on-disk layout: text stored once, and a format version checked on open."""

from __future__ import annotations

import json

import pytest
import tantivy

from qres.backends.base import IndexFormatError
from qres.backends.embedded import FORMAT, EmbeddedBackend
from qres.corpus.readers import Question
from qres.indexing.pipeline import index_questions

QUESTION = Question("q1", "Booting Ubuntu from a USB stick", "Ünïcode body,\ntwo lines", ("usb",))


@pytest.fixture
def backend(tmp_path):
    b = EmbeddedBackend(tmp_path / "ix", create=True)
    b.upsert([QUESTION])
    b.commit()
    yield b
    b.close()


def test_title_body_and_tags_are_stored_not_indexed_as_whole_terms(backend):
    searcher = backend._index.searcher()
    for field, text in (("title", QUESTION.title), ("body", QUESTION.body), ("tags", "usb")):
        with pytest.raises(ValueError, match="not indexed"):
            searcher.search(tantivy.Query.term_query(backend._schema, field, text.encode()), 1)
    assert backend.fetch(["q1"]) == {"q1": QUESTION}  # stored text round-trips exactly
    assert [h.id for h in backend.search("boot usb", 5)] == ["q1"]  # analysed terms searched


def test_new_indexes_record_the_format(backend):
    assert backend.metadata()["format"] == FORMAT


@pytest.mark.parametrize("old", [1, None])
def test_an_index_of_another_format_says_to_rebuild(tmp_path, backend, old):
    meta_path = backend.path / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta.pop("format") if old is None else meta.update(format=old)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match=r"re-index with `qres index CORPUS --rebuild`"):
        EmbeddedBackend(backend.path)


def test_cli_on_an_old_index_gives_one_line_and_rebuild_fixes_it(run, tmp_path):
    corpus = tmp_path / "q.tsv"
    corpus.write_text("id\ttitle\tbody\na1\tBoot from usb\tthe bios skips it\n")
    assert run("index", corpus).exit_code == 0
    meta_path = tmp_path / "home" / "index" / "meta.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "format": 1}))
    result = run("search", "usb")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: {meta_path.parent} was written by another qres version (index format 1, "
        "this qres reads 2 and 3): re-index with `qres index CORPUS --rebuild`"
    ]
    assert run("index", corpus).exit_code == 1  # no silent mixing of layouts
    assert run("index", corpus, "--rebuild").exit_code == 0
    assert "a1" in run("--json", "search", "usb").output


def test_an_evaluation_cache_of_an_old_format_is_rebuilt(run, tmp_path, monkeypatch):
    from qres import paths
    from qres.evaluation.rankers import open_eval_index

    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    stale = EmbeddedBackend(paths.home() / "eval" / "x", create=True)
    stale.set_metadata({"format": 1})
    stale.close()
    with open_eval_index("embedded", "x") as fresh:
        assert fresh.metadata()["format"] == FORMAT and fresh.count() == 0


def schema_before_extras() -> tantivy.Schema:
    """The tantivy schema qres wrote before it stored extras (formats 2 and 3 alike)."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, index_option="basic", tokenizer_name="raw")
    for name in ("title", "body", "tags"):
        builder.add_bytes_field(name, stored=True)
    for name in ("title_terms", "body_terms"):
        builder.add_text_field(name, index_option="freq", tokenizer_name="qres_terms")
    builder.add_integer_field("slot", stored=True, fast=True)
    return builder.build()


COUNTED = Question("q2", "Visa on arrival", "at the airport", (), {"answer_count": 3})


def test_an_index_made_before_extras_answers_with_none_and_a_rebuild_stores_them(
    tmp_path, monkeypatch, caplog
):
    from qres.backends.embedded import directory

    with monkeypatch.context() as old_qres:
        old_qres.setattr(directory, "schema", schema_before_extras)
        with EmbeddedBackend(tmp_path / "ix", create=True) as old:
            old.upsert([QUESTION])
            old.commit()
    b = EmbeddedBackend(tmp_path / "ix")
    assert not b.stores_extras
    assert b.fetch(["q1"]) == {"q1": QUESTION} and b.fetch(["q1"])["q1"].extras == {}
    assert [h.id for h in b.search("boot usb", 5)] == ["q1"]
    b.upsert([COUNTED])  # written, its extras dropped, saying so once
    b.upsert([COUNTED])
    b.commit()
    said = [r.getMessage() for r in caplog.records if "extras" in r.getMessage()]
    assert len(said) == 1 and "--rebuild" in said[0]
    assert b.fetch(["q2"])["q2"].extras == {} and b.count() == 2
    # re-indexing does not write it again and again for extras this index cannot hold
    assert index_questions(b, [COUNTED], skip_unchanged=True).unchanged == 1
    b.begin_rebuild()
    b.upsert([QUESTION, COUNTED])
    b.finish_rebuild()
    assert b.stores_extras and b.fetch(["q2"])["q2"].extras == {"answer_count": 3}
    b.close()
    assert EmbeddedBackend(tmp_path / "ix").fetch(["q2"])["q2"].extras == {"answer_count": 3}


def test_compaction_keeps_extras(tmp_path):
    b = EmbeddedBackend(tmp_path / "ix", create=True)
    b.upsert([QUESTION, COUNTED])
    b.upsert([COUNTED])  # a replaced document: compaction has something to reclaim
    b.commit()
    b.compact()
    assert b.fetch(["q2"])["q2"].extras == {"answer_count": 3}
    assert b.fetch(["q1"])["q1"].extras == {}
    b.close()
