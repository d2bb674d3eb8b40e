"""A title being typed: its last word, maybe unfinished, completed from the titles of its
best BM25 matches (qres.ranking.completion), in `qres search --typing`, `/search?typing=true`
and `qres evaluate --typing`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from qres.cli import cli
from qres.corpus.readers import Question
from qres.indexing.index import Index
from qres.ranking import completion
from qres.ranking.search import SearchPipeline

from .fakes import schema_of_an_older_qres

TITLES = ["Boot from a USB stick", "usb drive not seen", "US keyboard layout", "Boot from USB"]


def test_the_last_word_becomes_the_most_frequent_word_it_starts():
    assert completion.complete("Boot Ubuntu from us", TITLES) == "Boot Ubuntu from usb"
    assert completion.complete("bo", TITLES) == "boot"
    # equal counts: the word of the better match (met first) wins
    assert completion.complete("st", ["a stick", "a stack"]) == "stick"
    assert completion.complete("st", ["a stack", "a stick"]) == "stack"


@pytest.mark.parametrize(
    "typed",
    ["Boot from us ", "Boot from us?", "Boot from zz", "", "  "],
    ids=["space", "punctuation", "nothing-extends", "empty", "blank"],
)
def test_a_finished_or_unknown_last_word_is_searched_as_typed(typed):
    assert completion.complete(typed, TITLES) == typed


def test_a_word_with_inner_punctuation_is_completed_whole():
    assert completion.last_word("my wi-f") == "wi-f"
    assert completion.complete("my wi-f", ["wi-fi drops", "wifi card"]) == "my wi-fi"
    assert completion.last_word("ends here.") is None


@pytest.fixture(scope="module")
def forum(tmp_path_factory):
    index = tmp_path_factory.mktemp("typing") / "index"
    questions = [
        Question("1", "Boot Ubuntu from a USB stick", "the installer on a usb stick"),
        Question("2", "USB stick not mounted", "my usb stick is not seen"),
        Question("3", "Ubuntu user password reset", "forgot the password of a user"),
        Question("4", "Boot menu missing", "grub does not show at boot"),
    ]
    with Index.open(index) as ix:
        ix.add(questions)
    return index


def test_the_pipeline_searches_the_completed_text(forum):
    with SearchPipeline.open(forum) as pipeline:
        assert pipeline.complete_typed("boot ubuntu from us") == "boot ubuntu from usb"
        assert pipeline.complete_typed("boot ubuntu from us ") == "boot ubuntu from us "
        typed = pipeline.search("boot ubuntu from us", 3, typing=True)
        assert [r.id for r in typed] == [r.id for r in pipeline.search("boot ubuntu from usb", 3)]
        assert [r.id for r in typed] != [r.id for r in pipeline.search("boot ubuntu from us", 3)]


@pytest.fixture(scope="module")
def forum_with_vectors(tmp_path_factory):
    from qres.encoders.model_set import SHIPPED_GRU

    index = tmp_path_factory.mktemp("typing-vectors") / "index"
    with Index.open(index, SHIPPED_GRU) as ix:
        ix.add(
            [
                Question("1", "Boot Ubuntu from a USB stick", "the installer on a usb stick"),
                Question("2", "USB stick not mounted", "my usb stick is not seen"),
                Question("3", "Ubuntu user password reset", "forgot the password of a user"),
                Question("4", "Boot menu missing", "grub does not show at boot"),
                Question("5", "usb ports dead after boot", "no usb device works"),
            ]
        )
    return index


@pytest.mark.parametrize("mode", ["hybrid", "dense", "bm25"])
@pytest.mark.parametrize("typed", ["boot ubuntu from usb", "boot ubuntu from us"])
def test_a_typed_search_ranks_what_it_searched_with_bm25_searched_once_where_it_can(
    forum_with_vectors, typed, mode, monkeypatch
):
    with SearchPipeline.open(forum_with_vectors) as pipeline:
        searched = pipeline.complete_typed(typed)
        assert searched == "boot ubuntu from usb"
        expected = pipeline.search(searched, 4, mode=mode)
        calls = []
        whole_index = pipeline.backend.candidates

        def candidates(text, k, only_ids=None, query_vector=None):
            calls.append(only_ids)
            return whole_index(text, k, only_ids, query_vector)

        monkeypatch.setattr(pipeline.backend, "candidates", candidates)
        typed_results = pipeline.search(typed, 4, mode=mode, typing=True)
        assert [(r.id, r.score) for r in typed_results] == [(r.id, r.score) for r in expected]
        # the word as typed stays: the completion's BM25 search is the one rescored
        assert calls.count(None) == (1 if typed == searched else 2)
        # as `qres search --typing` and /search?typing=true ask: the text searched too
        calls.clear()
        text, served = pipeline.search_typed(typed, 4, mode)
        assert text == searched and [r.id for r in served] == [r.id for r in expected]
        assert calls.count(None) == (1 if typed == searched else 2)


def test_qres_search_typing_says_what_it_searched(forum):
    args = ["--json", "--index-dir", str(forum), "search", "usb stick not mou", "-k", "2"]
    typed = CliRunner().invoke(cli, [*args, "--typing"])
    assert typed.exit_code == 0, typed.output
    answer = json.loads(typed.stdout)
    assert answer["query"] == "usb stick not mou" and answer["searched"] == "usb stick not mounted"
    assert answer["results"][0]["id"] == "2"
    plain = json.loads(CliRunner().invoke(cli, args).stdout)
    assert plain["searched"] == "usb stick not mou"
    table = " ".join(CliRunner().invoke(cli, [*args[1:], "--typing"]).output.split())
    assert table.startswith("'usb stick not mou' → 'usb stick not mounted' — bm25, ")
    assert CliRunner().invoke(cli, args[1:]).output.startswith("'usb stick not mou' — bm25, ")


def test_qres_evaluate_typing_needs_a_title_form(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    args = ["evaluate", "--dataset", "stackexchange", "--data-dir", str(tmp_path), "--typing"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "--typing searches a title as it is typed: add --query title-chars:N" in result.output
    semeval = ["evaluate", "--dataset", "semeval2016", "--query", "title-chars:20", "--typing"]
    given = CliRunner().invoke(cli, [*semeval, "--ranker", "given-order"])
    assert given.exit_code == 2 and "--typing needs rankers that search" in given.output


def test_an_index_made_before_title_words_completes_no_first_word(tmp_path, monkeypatch, caplog):
    import uvicorn

    from qres.backends.embedded import EmbeddedBackend, directory

    questions = [Question("1", "Schengen visa overstay", "fined"), Question("2", "Lost bag", "")]
    with monkeypatch.context() as old_qres:
        old_qres.setattr(directory, "schema", lambda: schema_of_an_older_qres(closed_mark=True))
        with Index.open(tmp_path / "index") as ix:
            ix.add(questions)
    args = ["--index-dir", str(tmp_path / "index"), "--json", "info"]
    shown = json.loads(CliRunner().invoke(cli, args).output)["typed_first_words"]
    assert shown.startswith("searched as typed: made before") and "`qres compact`" in shown
    monkeypatch.setattr(uvicorn, "run", lambda *_args, **_options: None)  # starts, serves nothing
    serve = ["--index-dir", str(tmp_path / "index"), "serve", "--port", "0"]
    assert CliRunner().invoke(cli, serve).exit_code == 0
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert said == [f"a first word being typed is {shown}"]  # qres serve says so at its start
    with EmbeddedBackend(tmp_path / "index") as backend:
        assert backend.title_words("schen", 3) == []
        assert SearchPipeline(backend).complete_typed("schen") == "schen"  # as typed, as before
        backend.compact()  # rewritten with today's fields: the titles' words are indexed
        assert backend.title_words("schen", 3) == [("schengen", 1)]
        assert SearchPipeline(backend).complete_typed("schen") == "schengen"
    shown = json.loads(CliRunner().invoke(cli, args).output)["typed_first_words"]
    assert shown == "completed from the titles' words"
    caplog.clear()
    assert CliRunner().invoke(cli, serve).exit_code == 0
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
