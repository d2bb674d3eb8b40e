"""The StackExchange dump reader (Posts.xml): questions only, HTML to text, both tag styles,
extras, gzip, malformed rows and XML."""

import csv
import gzip
import io
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from qres.cli import cli
from qres.corpus import stackexchange
from qres.corpus.readers import CorpusError, ReadStats, detect_format, read_corpus
from qres.corpus.stackexchange import html_to_text, split_tags

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TRAVEL = DATA / "stackexchange-travel"
KAGGLE = DATA / "stackexchange-kaggle-tags"

POSTS = """\ufeff<?xml version="1.0" encoding="utf-8"?>
<posts>
  <row Id="1" PostTypeId="1" Score="12" AnswerCount="3" AcceptedAnswerId="7" \
Title="Visa for &quot;Schengen&quot; area?" \
Body="&lt;p&gt;Do I need a visa &amp;amp; what does it cost?&lt;/p&gt;&lt;pre&gt;&lt;code&gt;\
fee = 60 &amp;lt;EUR&amp;gt;&lt;/code&gt;&lt;/pre&gt;" Tags="&lt;visas&gt;&lt;schengen&gt;" />
  <row Id="2" PostTypeId="2" ParentId="1" Body="&lt;p&gt;an answer&lt;/p&gt;" />
  <row Id="3" PostTypeId="1" ClosedDate="2013-05-01T10:00:00.000" Title="Cheap flights" \
Body="&lt;p&gt;one&lt;/p&gt;&lt;p&gt;two&lt;/p&gt;" Tags="|air-travel|budget|" />
</posts>
"""


def write(tmp_path: Path, text: str, name: str = "Posts.xml") -> Path:
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_questions_only_with_text_bodies_tags_and_extras(tmp_path):
    path = write(tmp_path, POSTS)
    assert detect_format(path) == "stackexchange"
    first, second = read_corpus(path)
    assert (first.id, second.id) == ("1", "3")  # the answer (PostTypeId 2) is passed over
    assert first.title == 'Visa for "Schengen" area?'
    assert first.body == "Do I need a visa & what does it cost?\n\nfee = 60 <EUR>"
    assert first.tags == ("visas", "schengen")
    assert first.extras == {"score": 12, "answer_count": 3, "accepted_answer_id": "7"}
    assert second.body == "one\n\ntwo"
    assert second.tags == ("air-travel", "budget")
    assert second.extras == {"closed_date": "2013-05-01T10:00:00.000"}


def test_gzipped_dump_reads_the_same(tmp_path):
    plain = list(read_corpus(write(tmp_path, POSTS)))
    gz = write(tmp_path, POSTS, "Posts.xml.gz")
    assert detect_format(gz) == "stackexchange"
    assert [(q.id, q.body, q.tags, q.extras) for q in read_corpus(gz)] == [
        (q.id, q.body, q.tags, q.extras) for q in plain
    ]


def test_html_to_text_keeps_code_and_separates_blocks():
    html = (
        "<p>a<b>b</b></p><ul><li>x</li><li>y &gt; z</li></ul>"
        "<pre><code>if a &lt; b:\n  go()</code></pre>"
    )
    assert html_to_text(html) == "ab\n\nx\n\ny > z\n\nif a < b:\ngo()"
    assert html_to_text("") == ""


def _through_html_parser(html: str) -> str:
    return "".join(stackexchange._parser_parts(html))


def _real_bodies() -> list[str]:
    """Every question body of the travel forum's dump and of the four Kaggle sites."""
    assert TRAVEL.is_dir() and KAGGLE.is_dir(), f"shared data missing: {TRAVEL}, {KAGGLE}"
    bodies = [
        row.get("Body") or ""
        for _, row in ET.iterparse(TRAVEL / "Posts.xml")
        if row.tag == "row" and row.get("PostTypeId") == "1"
    ]
    for site in ("biology", "cooking", "crypto", "robotics"):
        path = KAGGLE / f"{site}.csv.zip"
        with zipfile.ZipFile(path) as archive, archive.open(archive.namelist()[0]) as raw:
            bodies += [row["content"] for row in csv.DictReader(io.TextIOWrapper(raw, "utf-8"))]
    return bodies


def test_simple_html_is_read_as_html_parser_reads_it_on_every_real_body():
    csv.field_size_limit(2**31 - 1)
    bodies = _real_bodies()
    simple = [b for b in bodies if stackexchange._simple_parts(b) is not None]
    assert len(bodies) > 45_000
    assert len(simple) > 0.99 * len(bodies)  # the fast path is the one real bodies take
    different = [
        b for b in simple if "".join(stackexchange._simple_parts(b)) != _through_html_parser(b)
    ]
    assert different == []


@pytest.mark.parametrize(
    "html",
    [
        "<p>a<br/>b</p><br>c<BR />d",
        "<P CLASS='x'>A</P ><hr/>&amp;&lt;&#39;&nbsp;AT&T",
        "<a href=\"https://x.org/?a=1&amp;b=2\" title='t'>link</a>",
        "a < b<p>c",  # a bare "<"
        "<!-- a comment --><p>x</p>",
        "<script>if (a<b) {}</script><p>y</p>",
        "<p>a</p x><b>b",  # an end tag with an attribute
        "<a\xa0href='x'>p</a>",  # a space HTML does not count as one
        "<p>unclosed <b",
        "<my-tag>x</my-tag><1p>",
        "",
    ],
)
def test_html_in_any_form_reads_as_html_parser_reads_it(html, monkeypatch):
    parts = stackexchange._simple_parts(html)
    if parts is not None:
        assert "".join(parts) == _through_html_parser(html)
    text = html_to_text(html)
    monkeypatch.setattr(stackexchange, "_simple_parts", lambda html: None)
    assert text == html_to_text(html)


@pytest.mark.parametrize(
    "value, tags",
    [("<a><b-c>", ("a", "b-c")), ("|a|b-c|", ("a", "b-c")), ("", ()), (None, ())],
)
def test_both_tag_styles(value, tags):
    assert split_tags(value) == tags


def test_a_bad_row_names_file_and_line_and_skip_bad_goes_on(tmp_path):
    text = POSTS.replace('<row Id="3"', '<row Id=""').replace('Score="12"', 'Score="many"')
    path = write(tmp_path, text)
    with pytest.raises(CorpusError, match=r"Posts\.xml:3: question 1: Score='many'"):
        list(read_corpus(path))
    stats = ReadStats()
    assert list(read_corpus(path, skip_bad=True, stats=stats)) == []
    assert stats.skipped == 2
    assert "Posts.xml:5: a question row without an Id" in stats.problems[1]


def test_malformed_xml_stops_at_its_line_after_the_rows_before(tmp_path):
    lines = POSTS.splitlines(keepends=True)
    lines[4] = '  <row Id="3" PostTypeId="1" Title="broken\n'  # an attribute never closed
    path = write(tmp_path, "".join(lines[:6]))
    read = []
    with pytest.raises(CorpusError, match=r"Posts\.xml:\d+: malformed XML") as err:
        read.extend(read_corpus(path, skip_bad=True))
    assert [q.id for q in read] == ["1"]
    assert err.value.line >= 5


def test_other_xml_roots_and_truncated_gzip_are_refused_in_one_line(tmp_path):
    other = write(tmp_path, "<users><row Id='1'/></users>\n", "Users.xml")
    with pytest.raises(CorpusError, match="expected a StackExchange Posts.xml"):
        list(read_corpus(other, "stackexchange"))
    gz = write(tmp_path, POSTS * 50, "Posts.xml.gz")
    gz.write_bytes(gz.read_bytes()[:200])
    with pytest.raises(CorpusError, match=r"Posts\.xml\.gz:\d+: .*truncated"):
        list(read_corpus(gz, "stackexchange"))


def test_qres_index_reads_a_dump(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    path = write(tmp_path, POSTS)
    ix = ["--index-dir", str(tmp_path / "ix")]
    result = CliRunner().invoke(cli, [*ix, "index", str(path)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, [*ix, "--json", "search", "schengen visa"])
    assert result.exit_code == 0, result.output
    assert '"1"' in result.output


def test_a_dump_cut_short_says_so_and_what_was_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    # questions 1 and 3, then the file ends inside a third question's row
    path = write(tmp_path, POSTS.replace("</posts>\n", '  <row Id="4" PostTypeId="1" Title="cu'))
    ix = ["--index-dir", str(tmp_path / "ix")]
    result = CliRunner().invoke(cli, [*ix, "index", str(path)])
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith(f"error: {path}:") and "malformed XML (unclosed token" in line
    assert line.endswith(
        ": the file ends before </posts>, so it looks cut short; the questions read before "
        "it are in the index (2)"
    )
    info = CliRunner().invoke(cli, [*ix, "--json", "info"])
    assert '"questions": 2' in info.output
    rebuilt = CliRunner().invoke(cli, [*ix, "index", str(path), "--rebuild"])
    assert rebuilt.output.rstrip().endswith(
        "looks cut short; the rebuild was discarded; the index is as it was before this run"
    )


def test_xml_broken_inside_the_file_is_not_called_cut_short(tmp_path):
    lines = POSTS.splitlines(keepends=True)
    lines[4] = '  <row Id="3" PostTypeId="1" Title="a" /></row>\n'  # a stray end tag
    with pytest.raises(CorpusError, match="mismatched tag") as err:
        list(read_corpus(write(tmp_path, "".join(lines))))
    assert "cut short" not in str(err.value)


def test_the_travel_dump():
    posts = TRAVEL / "Posts.xml"
    assert posts.exists(), f"{posts} is missing: the shared data must be present"
    questions = list(read_corpus(posts))
    assert len(questions) == 4919
    assert len({q.id for q in questions}) == 4919
    assert all(q.title and q.body and "<p>" not in q.body for q in questions)


# -- issue 34: one endless attribute ----------------------------------------------------------


def posts_with_body(body: str) -> str:
    rows = [("1", "b"), ("2", body), ("3", "b")]
    lines = [f'  <row Id="{i}" PostTypeId="1" Title="t{i}" Body="{b}" />' for i, b in rows]
    return '<?xml version="1.0" encoding="utf-8"?>\n<posts>\n' + "\n".join(lines) + "\n</posts>\n"


def test_an_endless_attribute_is_refused_in_one_line_after_the_rows_before(tmp_path, monkeypatch):
    """A 4 GB Body in a 4 MB .xml.gz ran 120 s at full CPU; past MAX_TOKEN_CHARS (64 MB,
    lowered to 1 MB here) an unfinished element or attribute stops the run in one line."""
    monkeypatch.setattr(stackexchange, "MAX_TOKEN_CHARS", 2**20)
    path = write(tmp_path, posts_with_body("x" * 3_000_000), "Posts.xml.gz")
    read = []
    with pytest.raises(CorpusError) as err:
        read.extend(q.id for q in read_corpus(path, skip_bad=True))  # no record boundary
    assert read == ["1"]
    assert str(err.value) == (
        f"{path}:4: an element or attribute runs past 1,048,576 characters (a forum post is a "
        "few KB): not read"
    )


def test_a_long_attribute_is_fed_to_expat_in_few_pieces(tmp_path, monkeypatch):
    """expat 2.5 parses an unfinished token again on every feed: fed 64 KB at a time, a
    20 MB attribute took 5.7 s (quadratic). While no event comes the pieces grow, so a 4 MB
    attribute is fed in a handful of pieces, not 64 (benchmarks/hostile_input.py times it)."""
    path = write(tmp_path, posts_with_body("x" * 4_000_000))
    feeds, real = [], ET.XMLPullParser.feed
    monkeypatch.setattr(ET.XMLPullParser, "feed", lambda self, d: feeds.append(1) or real(self, d))
    questions = list(read_corpus(path))
    assert [q.id for q in questions] == ["1", "2", "3"] and questions[1].body == "x" * 20_000
    assert len(feeds) < 20
