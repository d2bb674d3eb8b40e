"""`qres evaluate --query`: a benchmark's queries searched with their titles, or the first
words of their titles, as a forum's widget sends them."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from qres.cli import cli
from qres.corpus.readers import Question
from qres.evaluation import query_form
from qres.evaluation.runner import load_benchmark
from tests.test_forum_evaluation import write_forum


def test_forms_cut_the_query_and_keep_what_replays_the_forum():
    q = Question("7", "Schengen visa overstay by one day", "I stayed a day too long.", ("visa",))
    q = Question(q.id, q.title, q.body, q.tags, {"duplicate_dates": "2015-01-01"})
    assert query_form.apply(q, "question") is q
    title = query_form.apply(q, "title")
    assert (title.title, title.body, title.text) == (q.title, "", q.title)
    assert title.id == "7" and title.extras == q.extras and title.tags == q.tags
    assert query_form.apply(q, "title-words:2").text == "Schengen visa"
    assert query_form.apply(q, "title-words:40").text == q.title
    assert query_form.apply(Question("8", "", "only a body here"), "title-words:2").text == (
        "only a"
    )
    assert query_form.apply(q, "title-chars:11").text == "Schengen vi"  # cut mid-word
    assert query_form.apply(q, "title-chars:14").title == "Schengen visa "  # a finished word


@pytest.mark.parametrize(
    "bad", ["titles", "title-words", "title-words:0", "title-words:x", "title-chars:0", ""]
)
def test_unknown_forms_are_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="question, title, title-words:N or title-chars:N"):
        query_form.check(bad)


def test_load_benchmark_searches_semeval_and_forum_queries_by_title(tmp_path, shared_data):
    whole = load_benchmark("semeval2016", "dev", shared_data)
    titles = load_benchmark("semeval2016", "dev", shared_data, query="title")
    assert titles.query_form == "title" and len(titles.queries) == len(whole.queries)
    for a, b in zip(whole.queries, titles.queries, strict=True):
        assert b.question.text == a.question.title.strip() and b.relevant == a.relevant


def _forum(tmp_path):
    """Post 2 was closed as a duplicate of 1: their bodies share words, their titles none."""
    folder = tmp_path / "forum"
    folder.mkdir()
    rows = [
        '<row Id="1" PostTypeId="1" Title="alpha question" Body="zebra giraffe savanna" />',
        '<row Id="2" PostTypeId="1" Title="omega puzzle" Body="zebra giraffe savanna trip" />',
        '<row Id="3" PostTypeId="1" Title="omega gamma" Body="unrelated words entirely" />',
    ]
    (folder / "Posts.xml").write_text("<posts>\n" + "\n".join(rows) + "\n</posts>\n")
    (folder / "PostLinks.xml").write_text(
        '<postlinks>\n<row Id="1" CreationDate="2012-01-01" PostId="2" RelatedPostId="1" '
        'LinkTypeId="3" />\n</postlinks>\n'
    )
    return folder


def _evaluate(folder, *extra):
    args = ["--json", "evaluate", "--dataset", "stackexchange", "--data-dir", str(folder)]
    result = CliRunner().invoke(cli, [*args, "--ranker", "bm25", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)[0]["metrics"]


def test_qres_evaluate_query_title_searches_with_the_title_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = _forum(tmp_path)
    assert _evaluate(folder)["R@1"] == 100.0  # the bodies match
    assert _evaluate(folder, "--query", "question")["R@1"] == 100.0
    # The title "omega puzzle" shares no word with the original; it finds post 3 instead.
    assert _evaluate(folder, "--query", "title")["R@1"] == 0.0
    assert _evaluate(folder, "--query", "title-words:1")["R@1"] == 0.0
    assert _evaluate(folder, "--query", "title-chars:6")["R@1"] == 0.0


def test_qres_evaluate_refuses_an_unknown_query_form(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    folder = write_forum(tmp_path / "forum", [("11", "1", "2012-01-01", 3)])
    args = ["evaluate", "--dataset", "stackexchange", "--data-dir", str(folder)]
    result = CliRunner().invoke(cli, [*args, "--ranker", "bm25", "--query", "body"])
    assert result.exit_code == 2
    assert "unknown query form 'body'" in result.output
