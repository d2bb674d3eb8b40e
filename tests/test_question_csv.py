"""The question CSV format (``csv``): a header naming id, title, body [, tags], read with
Python's csv module, so fields may hold commas, quotes and newlines; a ``.csv`` file is
SemEval's CSV only when its header is SemEval's."""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

import pytest

from qres.corpus import stackexchange
from qres.corpus.readers import FORMATS, CorpusError, ReadStats, detect_format, read_corpus


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


FORUM = (
    "id,title,body,tags,answer_count\n"
    '1,"Wifi, then nothing","It drops.\n\nEvery ""hour"", exactly.","wifi,network",3\n'
    "2,No sound over HDMI,,audio,\n"
)


def test_a_question_csv_is_read_with_quotes_commas_and_newlines_in_fields(tmp_path):
    path = write(tmp_path / "forum.csv", FORUM)
    assert "csv" in FORMATS and detect_format(path) == "csv"
    first, second = read_corpus(path)
    assert (first.id, first.title) == ("1", "Wifi, then nothing")
    assert first.body == 'It drops.\n\nEvery "hour", exactly.'
    assert first.tags == ("wifi", "network") and dict(first.extras) == {"answer_count": 3}
    assert (second.id, second.body, second.tags, dict(second.extras)) == ("2", "", ("audio",), {})


def test_semeval_csv_is_still_told_apart_by_its_header(tmp_path):
    path = write(tmp_path / "pairs.csv", "question1_id,question2_id,question1,question2\n")
    assert detect_format(path) == "semeval-csv"


@pytest.mark.parametrize(
    ("content", "line", "said"),
    [
        (
            "id,title,body\n1,t,b\n2,t\n3,t,b\n",
            3,
            "expected 3 comma-separated fields, found 2",
        ),
        (
            "id,title,text\n1,t,b\n",
            1,
            "header lacks column(s) body (found id, title, text",
        ),
        ('id,title,body\n1,t,b\n2,"t,b\n3,t,b\n', 3, "a quote opened in this record"),
        ("id,title,body,answer_count\n1,t,b,many\n", 2, "'answer_count': 'many'"),
    ],
)
def test_a_bad_csv_record_is_one_line_naming_file_line_and_problem(tmp_path, content, line, said):
    path = write(tmp_path / "forum.csv", content)
    with pytest.raises(CorpusError) as info:
        list(read_corpus(path))
    assert (info.value.path, info.value.line) == (str(path), line)
    assert said in info.value.problem and "\n" not in str(info.value)


def test_a_csv_header_that_is_neither_format_says_what_both_expect(tmp_path):
    path = write(tmp_path / "c.csv", "id,question1\n0,q\n")
    with pytest.raises(CorpusError, match=r":1: ") as info:
        list(read_corpus(path))
    said = info.value.problem
    assert "id, title, body" in said and "question2_id, question2" in said
    assert "found id, question1" in said


def test_skip_bad_skips_a_csv_row_and_reads_on(tmp_path):
    path = write(tmp_path / "forum.csv", 'id,title,body\n1,t,b\n2,t\n3,t,"b\nc"\n4,t,b\n')
    stats = ReadStats()
    assert [q.id for q in read_corpus(path, skip_bad=True, stats=stats)] == ["1", "3", "4"]
    assert stats.skipped == 1 and stats.problems == [
        f"{path}:3: expected 3 comma-separated fields, found 2"
    ]


def test_a_quote_open_to_the_end_stops_even_with_skip_bad(tmp_path):
    path = write(tmp_path / "forum.csv", 'id,title,body\n1,t,b\n2,"t,b\n3,t,b\n')
    read = []
    with pytest.raises(CorpusError, match="forum.csv:3: a quote opened"):
        read.extend(read_corpus(path, skip_bad=True))
    assert [q.id for q in read] == ["1"]


def test_a_kaggle_export_is_refused_naming_the_columns_it_has(tmp_path, shared_data):
    """The kaggle StackExchange exports name the body `content`: one line saying so."""
    zipped = shared_data / "stackexchange-kaggle-tags" / "robotics.csv.zip"
    with zipfile.ZipFile(zipped) as archive:
        archive.extractall(tmp_path)
    path = tmp_path / "robotics.csv"
    assert detect_format(path) == "csv"
    with pytest.raises(CorpusError) as info:
        next(read_corpus(path))
    assert str(info.value) == (
        f"{path}:1: header lacks column(s) body (found id, title, content, tags; a question "
        "CSV names id, title, body [, tags], a SemEval subtask B CSV question2_id, question2)"
    )


def test_qres_index_takes_a_question_csv(run, tmp_path):
    path = write(tmp_path / "forum.csv", FORUM)
    result = run("--json", "index", path, "--index-dir", tmp_path / "ix")
    assert result.exit_code == 0, result.output
    assert '"indexed": 2' in result.output
    forced = run("--json", "index", path, "--format", "csv", "--index-dir", tmp_path / "ix")
    assert forced.exit_code == 0, forced.output


HTML = "<p>It drops &amp; reconnects:</p>\n<pre><code>iwconfig wlan0\n</code></pre>"
PLAIN = "<p> adds a margin above my text; how do I remove it?"


def test_an_html_body_of_an_export_is_read_as_text_and_plain_text_as_written(tmp_path):
    """A forum's export keeps its posts' HTML: read as a dump's bodies are (tags dropped, code
    kept, entities decoded); a plain body that merely starts with a tag name stays as is."""
    rows = [["1", "Wifi drops", HTML], ["2", "Margins", PLAIN]]
    csv_path = tmp_path / "forum.csv"
    with csv_path.open("w", newline="") as f:
        csv.writer(f).writerows([["id", "title", "body"], *rows])
    jsonl = tmp_path / "forum.jsonl"
    jsonl.write_text(
        "".join(json.dumps(dict(zip(("id", "title", "body"), r, strict=True))) + "\n" for r in rows)
    )
    tsv = write(
        tmp_path / "forum.tsv", "id\ttitle\tbody\n1\tWifi drops\t<p>It drops &amp; more</p>\n"
    )
    for path in (csv_path, jsonl):
        first, second = read_corpus(path)
        assert first.body == "It drops & reconnects:\n\niwconfig wlan0", path
        assert second.body == PLAIN, path
    assert next(read_corpus(tsv)).body == "It drops & more"


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ("<!-- from the old forum --><p>It drops &amp; more</p>", "It drops & more"),
        ("<hr /><p>It drops</p>", "It drops"),
        ("<hr> is the tag I mean", "<hr> is the tag I mean"),  # no closing tag: as written
    ],
)
def test_a_body_opening_with_a_comment_or_a_rule_is_html_too(body, text):
    assert stackexchange.body_text(body) == text


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_blank_lines_before_the_header_are_skipped(tmp_path, fmt):
    sep = "," if fmt == "csv" else "\t"
    path = write(tmp_path / f"forum.{fmt}", f"\n\nid{sep}title{sep}body\n1{sep}Wifi{sep}drops\n")
    assert detect_format(path) == fmt
    assert [(q.id, q.title) for q in read_corpus(path)] == [("1", "Wifi")]


def test_a_header_error_is_one_line_and_names_its_line(tmp_path):
    path = write(tmp_path / "forum.csv", '\nid,"ti\ntle",x\n1,a,b\n')
    with pytest.raises(CorpusError) as info:
        list(read_corpus(path))
    assert info.value.line == 2
    assert "(found id, ti tle, x;" in str(info.value) and "\n" not in str(info.value)


def test_an_empty_csv_holds_no_questions(tmp_path):
    assert list(read_corpus(write(tmp_path / "forum.csv", "\n\n"))) == []
