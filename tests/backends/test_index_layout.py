"""The embedded index's on-disk layout: text stored once, and a format version checked on open."""

from __future__ import annotations

import json

import pytest
import tantivy

from qres.backends.base import IndexFormatError
from qres.backends.embedded import FORMAT, EmbeddedBackend
from qres.corpus.readers import Question

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
