"""What the service's writes take: the lines of a JSONL corpus as they were indexed, their
top-level display fields included (``qres.service.schemas``, without a server)."""

from __future__ import annotations

import json

import pytest

from qres.corpus.readers import read_corpus
from qres.service.schemas import ApiError, QuestionIn, parse_body, read_lines

LINES = [
    {"id": "n5", "title": "x", "answer_count": 3},
    {"id": 7, "title": "y", "tags": "wifi, network", "score": "12", "extras": {"views": 9}},
    {"id": "n6", "title": "z", "closed_date": "2013-05-01", "extras": {"closed_date": "old"}},
]


def test_posted_lines_are_read_as_the_jsonl_reader_reads_them(tmp_path):
    text = "\n".join(json.dumps(line) for line in LINES) + "\n"
    corpus = tmp_path / "forum.jsonl"
    corpus.write_text(text)
    indexed = [(q.id, q.title, q.tags, dict(q.extras)) for q in read_corpus(corpus)]
    posted = [(q.id, q.title, q.tags, dict(q.extras)) for q in read_lines(text.encode(), 100)]
    assert posted == indexed
    assert posted[0][3] == {"answer_count": 3} and posted[1][0] == "7"


def test_put_takes_top_level_display_fields_too():
    question = parse_body(QuestionIn, json.dumps({"title": "x", "answer_count": "4"}))
    assert question.extras == {"answer_count": 4}


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            {"id": "n5", "title": "x", "colour": "red"},
            "line 1: colour: unknown field (display fields go in extras).",
        ),
        (
            {"id": "n5", "title": "x", "answer_count": "lots"},
            "line 1: extras: 'answer_count': 'lots' is not a whole number.",
        ),
        ({"id": True, "title": "x"}, "line 1: id: input should be a valid string."),
    ],
)
def test_a_bad_field_is_one_sentence_naming_it(line, said):
    with pytest.raises(ApiError) as info:
        read_lines(json.dumps(line).encode(), 100)
    assert (info.value.status_code, info.value.detail) == (400, said)


def test_a_posted_html_body_is_stored_as_its_text_as_a_corpus_line_is():
    line = json.dumps({"id": "h1", "title": "Wifi", "body": "<p>It drops &amp; comes back</p>"})
    (question,) = read_lines(line.encode(), 10)
    assert question.body == "It drops & comes back"


def test_nulls_padded_ids_and_blank_tags_are_read_as_the_jsonl_reader_reads_them(tmp_path):
    lines = [
        {"id": " n7 ", "title": "x", "body": None, "tags": None, "extras": None},
        {"id": "n8", "title": None, "body": "y", "tags": [" wifi ", ""]},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\n"
    corpus = tmp_path / "forum.jsonl"
    corpus.write_text(text)
    indexed = [(q.id, q.title, q.body, q.tags, q.extras) for q in read_corpus(corpus)]
    posted = [(q.id, q.title, q.body, q.tags, q.extras) for q in read_lines(text.encode(), 100)]
    assert posted == indexed == [("n7", "x", "", (), {}), ("n8", "", "y", ("wifi",), {})]


def test_an_html_body_is_text_before_the_empty_check():
    line = json.dumps({"id": "h1", "title": "", "body": "<p> </p>"})
    with pytest.raises(ApiError) as info:
        read_lines(line.encode(), 10)
    assert info.value.detail == "line 1: question 'h1' has an empty title and body."


def test_lines_break_at_newlines_only_and_a_byte_order_mark_is_taken():
    """U+2028 is valid inside a JSON string (json.dumps writes it raw without ensure_ascii);
    splitting lines as str.splitlines() does cut such a line in two."""
    text = json.dumps({"id": "L1", "title": "a \u2028 b"}, ensure_ascii=False) + "\r\n"
    text += json.dumps({"id": "L2", "title": "c"}) + "\n"
    questions = read_lines(b"\xef\xbb\xbf" + text.encode(), 10)
    assert [(q.id, q.title) for q in questions] == [("L1", "a \u2028 b"), ("L2", "c")]


def test_a_body_is_held_to_the_limit_as_its_text_not_as_its_html():
    html = "<p>" + "<b>word</b> " * 2000 + "</p>"  # 24,000 characters of HTML, 10,000 of text
    line = json.dumps({"id": "h1", "title": "long", "body": html})
    (question,) = read_lines(line.encode(), 10)
    assert len(question.body) < 20_000 < len(html)
    with pytest.raises(ApiError) as info:
        read_lines(json.dumps({"id": "h2", "title": "t", "body": "x" * 20_001}).encode(), 10)
    assert info.value.detail == "line 1: body: string should have at most 20000 characters."
