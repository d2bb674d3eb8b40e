"""Malformed input through the real ``qres index``: every reader format, plain and gzipped.

Each case is a file whose good records come first, then one bad record (or an unreadable
stream), then, where the reader can go on, more good records. Indexing it into an index
that already holds three questions must

* without ``--skip-bad``: exit 1 with exactly one line, ``error: FILE:LINE: problem``, and
  leave the index holding the three questions plus every good record before the bad one;
* with ``--skip-bad``: where a record boundary follows the bad record, exit 0 with the bad
  record counted as skipped and the good records after it indexed too; where none does (a
  truncated or corrupt gzip stream, a bad header, malformed XML), fail as above.
"""

from __future__ import annotations

import gzip
import json
import shutil
import zlib
from dataclasses import dataclass

import pytest

from qres.backends.embedded import EmbeddedBackend

BASE = ["base1", "base2", "base3"]


@dataclass
class Case:
    id: str
    name: str  # the file name: its suffix picks the reader
    data: bytes
    line: int
    problem: str
    before: list[str]  # ids of the good records before the bad one
    after: list[str] | None = None  # ids indexed after it with --skip-bad; None: no boundary
    skipped: int = 1


def gz(text: str | bytes) -> bytes:
    return gzip.compress(text.encode("utf-8") if isinstance(text, str) else text, mtime=0)


# --- builders for each format -------------------------------------------------------------------


def askubuntu(ids) -> str:
    return "".join(f"{i}\ttitle of {i}\tbody of {i}\n" for i in ids)


def tsv(ids) -> str:
    return "".join(f"{i}\ttitle of {i}\tbody of {i}\tx,y\n" for i in ids)


TSV_HEADER = "id\ttitle\tbody\ttags\n"


def jsonl(ids) -> str:
    return "".join(json.dumps({"id": i, "title": f"title of {i}", "body": "b"}) + "\n" for i in ids)


CSV_HEADER = "id,question1_id,question2_id,question1,question2,relevance\r\n"


def csv_rows(ids) -> str:
    return "".join(f'0,Q1,{i},"Orig q. x","title of {i}. body of {i}",1\r\n' for i in ids)


def xml_rel(rid: str, subject: str | None = None, attrs: str | None = None, body="body") -> str:
    attrs = f'RELQ_ID="{rid}"' if attrs is None else attrs
    subject = f"title of {rid}" if subject is None else subject
    return (
        f'<Thread><RelQuestion {attrs} RELQ_CATEGORY="c"><RelQSubject>{subject}</RelQSubject>'
        f"<RelQBody>{body}</RelQBody></RelQuestion></Thread>\n"
    )


def xml(*rels: str, prolog: str = "") -> str:
    return (
        f'<?xml version="1.0" encoding="utf-8"?>\n{prolog}<xml>\n<OrgQuestion ORGQ_ID="Q1">\n'
        + "".join(rels)
        + "</OrgQuestion>\n</xml>\n"
    )


def truncated_gzip(name: str, lines: list[str], id_of, header_lines: int = 0) -> Case:
    """A gzip stream cut at 60%: the complete lines before the cut are kept."""
    whole = gz("".join(lines))
    data = whole[: len(whole) * 6 // 10]
    readable = zlib.decompressobj(wbits=31).decompress(data).decode("utf-8")
    complete = readable.count("\n")
    ids = [id_of(line) for line in lines[header_lines:complete]]
    return Case(f"truncated-{name}", name, data, complete + 1, "gzip file is truncated", ids)


def bad_crc(name: str, text: str, ids: list[str]) -> Case:
    """Every byte decompresses, but the checksum at the end does not match: all lines are
    read, then the error is reported after the last one."""
    data = bytearray(gz(text))
    data[-8] ^= 0xFF
    lines = text.count("\n")
    return Case(f"bad-crc-{name}", name, bytes(data), lines + 1, "CRC check failed", ids)


def bad_deflate(name: str, text: str) -> Case:
    """A valid gzip header followed by an invalid deflate block."""
    data = bytearray(gz(text))
    data[10] = 0xFF  # BFINAL=1, BTYPE=11: reserved
    return Case(f"bad-deflate-{name}", name, bytes(data), 1, "corrupt gzip data", [])


def many(prefix: str, n: int = 400) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def first_field(line: str, sep: str = "\t") -> str:
    return line.split(sep)[0]


LONG_NUMBER = "9" * 5_000
LONG_TEXT = "x" * 1_000_001  # a line holding it is over MAX_LINE_CHARS
TOO_LONG = "the line is longer than 1,000,000 characters"
DEEP = "[" * 100_000 + "]" * 100_000


CASES = [
    # askubuntu: id<TAB>title<TAB>body
    Case("au-extra-field", "c.txt", askubuntu(["a1"]) + "x\tt\tb\textra\n" + askubuntu(["a2"]),
         2, "expected 3 tab-separated fields", ["a1"], ["a2"]),
    Case("au-no-tabs", "c.txt", askubuntu(["a1", "a2"]) + "no tabs here\n" + askubuntu(["a3"]),
         3, "found 1", ["a1", "a2"], ["a3"]),
    Case("au-empty-id", "c.txt", askubuntu(["a1"]) + " \tt\tb\n" + askubuntu(["a2"]),
         2, "empty id", ["a1"], ["a2"]),
    Case("au-empty-text", "c.txt", askubuntu(["a1"]) + "a9\t \t\n" + askubuntu(["a2"]),
         2, "empty title and body", ["a1"], ["a2"]),
    Case("au-nul-in-id", "c.txt", askubuntu(["a1"]) + "a\x00b\tt\tb\n" + askubuntu(["a2"]),
         2, "control character", ["a1"], ["a2"]),
    Case("au-escape-in-id", "c.txt", askubuntu(["a1"]) + "a\x1b[2Jb\tt\tb\n" + askubuntu(["a2"]),
         2, "control character", ["a1"], ["a2"]),
    Case("au-gz-bad-record", "c.txt.gz", gz(askubuntu(["a1"]) + "bad\n" + askubuntu(["a2"])),
         2, "found 1", ["a1"], ["a2"]),
    truncated_gzip("c.txt.gz", askubuntu(many("a")).splitlines(keepends=True), first_field),
    Case("au-gz-not-gzip", "c.txt.gz", askubuntu(["a1"]).encode(), 1, "not a valid gzip file", []),
    bad_crc("c.txt.gz", askubuntu(many("a", 30)), many("a", 30)),
    bad_deflate("c.txt.gz", askubuntu(many("a"))),
    Case("au-gz-trailing-garbage", "c.txt.gz", gz(askubuntu(["a1", "a2"])) + b"garbage!",
         3, "not a valid gzip file", ["a1", "a2"]),
    # tsv: a header row
    Case("tsv-header-lacks-body", "c.tsv", "id\ttitle\ttext\n" + askubuntu(["t1"]),
         1, "header lacks column(s) body", []),
    Case("tsv-short-row", "c.tsv", TSV_HEADER + tsv(["t1"]) + "t9\tonly title\n" + tsv(["t2"]),
         3, "expected 4 tab-separated fields, found 2", ["t1"], ["t2"]),
    Case("tsv-long-row", "c.tsv", TSV_HEADER + tsv(["t1"]) + "t9\ta\tb\tc\td\n" + tsv(["t2"]),
         3, "found 5", ["t1"], ["t2"]),
    Case("tsv-empty-id", "c.tsv", TSV_HEADER + tsv(["t1", "t2"]) + "\tt\tb\tx\n" + tsv(["t3"]),
         4, "empty id", ["t1", "t2"], ["t3"]),
    Case("tsv-escape-in-id", "c.tsv", TSV_HEADER + tsv(["t1"]) + "t\x1b]0;x\x07\tt\tb\t\n",
         3, "control character", ["t1"], []),
    Case("tsv-gz-short-row", "c.tsv.gz", gz(TSV_HEADER + tsv(["t1"]) + "t9\n" + tsv(["t2"])),
         3, "found 1", ["t1"], ["t2"]),
    truncated_gzip("c.tsv.gz", [TSV_HEADER, *tsv(many("t")).splitlines(keepends=True)],
                   first_field, header_lines=1),
    Case("tsv-gz-not-gzip", "c.tsv.gz", (TSV_HEADER + tsv(["t1"])).encode(), 1, "not a valid", []),
    # jsonl: one object a line
    Case("jsonl-invalid", "c.jsonl", jsonl(["j1"]) + '{"id": "j9", "title": \n' + jsonl(["j2"]),
         2, "invalid JSON", ["j1"], ["j2"]),
    Case("jsonl-deep-nesting", "c.jsonl", jsonl(["j1", "j2"]) + DEEP + "\n" + jsonl(["j3"]),
         3, "nested too deeply", ["j1", "j2"], ["j3"]),
    Case("jsonl-deep-object", "c.jsonl",
         jsonl(["j1"]) + '{"a":' * 50_000 + "1" + "}" * 50_000 + "\n" + jsonl(["j2"]),
         2, "nested too deeply", ["j1"], ["j2"]),
    Case("jsonl-5000-digit-number", "c.jsonl",
         jsonl(["j1"]) + f'{{"id": {LONG_NUMBER}, "title": "t"}}\n' + jsonl(["j2"]),
         2, "invalid JSON", ["j1"], ["j2"]),
    Case("jsonl-5000-digit-title", "c.jsonl",
         jsonl(["j1"]) + f'{{"id": "j9", "title": {LONG_NUMBER}}}\n' + jsonl(["j2"]),
         2, "invalid JSON", ["j1"], ["j2"]),
    Case("jsonl-not-object", "c.jsonl", jsonl(["j1"]) + '["j9", "t"]\n' + jsonl(["j2"]),
         2, "expected a JSON object", ["j1"], ["j2"]),
    Case("jsonl-missing-id", "c.jsonl", jsonl(["j1"]) + '{"title": "t"}\n' + jsonl(["j2"]),
         2, "missing key 'id'", ["j1"], ["j2"]),
    Case("jsonl-null-id", "c.jsonl", jsonl(["j1"]) + '{"id": null, "title": "t"}\n',
         2, "'id' is null", ["j1"], []),
    Case("jsonl-object-id", "c.jsonl", jsonl(["j1"]) + '{"id": {"a": 1}, "title": "t"}\n'
         + jsonl(["j2"]), 2, "'id' must be a string or an integer, not an object", ["j1"], ["j2"]),
    Case("jsonl-array-id", "c.jsonl", jsonl(["j1"]) + '{"id": [1], "title": "t"}\n'
         + jsonl(["j2"]), 2, "not an array", ["j1"], ["j2"]),
    Case("jsonl-bool-id", "c.jsonl", jsonl(["j1"]) + '{"id": true, "title": "t"}\n'
         + jsonl(["j2"]), 2, "not a boolean", ["j1"], ["j2"]),
    Case("jsonl-float-id", "c.jsonl", jsonl(["j1"]) + '{"id": 1.5, "title": "t"}\n'
         + jsonl(["j2"]), 2, "not a non-integer number", ["j1"], ["j2"]),
    Case("jsonl-nul-in-id", "c.jsonl", jsonl(["j1"]) + '{"id": "j\\u0000", "title": "t"}\n'
         + jsonl(["j2"]), 2, "control character", ["j1"], ["j2"]),
    Case("jsonl-escape-in-id", "c.jsonl", jsonl(["j1"]) + '{"id": "\\u001b[31mj", "title": "t"}\n'
         + jsonl(["j2"]), 2, "control character", ["j1"], ["j2"]),
    Case("jsonl-lone-surrogate-id", "c.jsonl", jsonl(["j1"]) + '{"id": "j\\ud800", "title": "t"}\n'
         + jsonl(["j2"]), 2, "lone surrogate", ["j1"], ["j2"]),
    Case("jsonl-title-not-string", "c.jsonl", jsonl(["j1"]) + '{"id": "j9", "title": 5}\n'
         + jsonl(["j2"]), 2, "must be strings", ["j1"], ["j2"]),
    Case("jsonl-tags-of-objects", "c.jsonl", jsonl(["j1"]) + '{"id": "j9", "title": "t", '
         '"tags": [{"a": 1}]}\n' + jsonl(["j2"]), 2, "tags must be strings", ["j1"], ["j2"]),
    Case("jsonl-empty-text", "c.jsonl", jsonl(["j1"]) + '{"id": "j9", "body": " "}\n'
         + jsonl(["j2"]), 2, "empty title and body", ["j1"], ["j2"]),
    Case("jsonl-gz-deep-nesting", "c.jsonl.gz", gz(jsonl(["j1"]) + DEEP + "\n" + jsonl(["j2"])),
         2, "nested too deeply", ["j1"], ["j2"]),
    truncated_gzip("c.jsonl.gz", jsonl(many("j")).splitlines(keepends=True),
                   lambda line: json.loads(line)["id"]),
    Case("jsonl-gz-not-gzip", "c.jsonl.gz", jsonl(["j1"]).encode(), 1, "not a valid gzip", []),
    bad_crc("c.jsonl.gz", jsonl(many("j", 30)), many("j", 30)),
    # semeval-xml: <RelQuestion RELQ_ID=...>; malformed XML has no record boundary after it
    Case("xml-missing-id", "c.xml", xml(xml_rel("x1"), xml_rel("", attrs=""), xml_rel("x2")),
         5, "a RelQuestion without a RELQ_ID", ["x1"], ["x2"]),
    Case("xml-empty-text", "c.xml", xml(xml_rel("x1"), xml_rel("x9", "", body=" "), xml_rel("x2")),
         5, "empty title and body", ["x1"], ["x2"]),
    Case("xml-truncated", "c.xml", xml(xml_rel("x1"), xml_rel("x2"))[:-30],
         5, "unclosed token", ["x1", "x2"]),
    Case("xml-mismatched-tag", "c.xml",
         xml(xml_rel("x1"), "<Thread><RelQuestion></Thread>\n", xml_rel("x2")),
         5, "mismatched tag", ["x1"]),
    Case("xml-invalid-character-reference", "c.xml", xml(xml_rel("x1"), xml_rel("x2", "a&#27;b")),
         5, "malformed XML", ["x1"]),
    Case("xml-external-entity", "c.xml",
         xml(xml_rel("x1"), xml_rel("x2", "&e;"),
             prolog='<!DOCTYPE xml [<!ENTITY e SYSTEM "file:///etc/passwd">]>\n'),
         6, "undefined entity", ["x1"]),
    Case("xml-entity-bomb", "c.xml",
         xml(xml_rel("x1"), xml_rel("x2", "&b9;"), prolog="<!DOCTYPE xml [<!ENTITY b0 'lol'>"
             + "".join(f"<!ENTITY b{i} '{f'&b{i - 1};' * 10}'>" for i in range(1, 10)) + "]>\n"),
         6, "malformed XML", ["x1"]),
    Case("xml-gz-missing-id", "c.xml.gz",
         gz(xml(xml_rel("x1"), xml_rel("", attrs='RELQ_ID=" "'), xml_rel("x2"))),
         5, "without a RELQ_ID", ["x1"], ["x2"]),
    Case("xml-gz-not-gzip", "c.xml.gz", xml(xml_rel("x1")).encode(), 1, "not a valid gzip", []),
    # semeval-csv: one row a line; a stray quote may join rows
    Case("csv-bare-cr", "c.csv", CSV_HEADER + csv_rows(["c1"]) + "0,Q1,c9,q,ti\rtle. b,1\r\n"
         + csv_rows(["c2"]), 3, "bare carriage return", ["c1"], ["c2"]),
    Case("csv-quote-never-closed", "c.csv",
         CSV_HEADER + csv_rows(["c1"]) + '0,Q1,c9,q,"never closed. b,1\r\n'
         + "".join(f"0,Q1,c{i},q,t. b,1\r\n" for i in range(2, 1002)),
         3, "a quote opened in this record is never closed (a stray quote joined lines 3-1003)",
         ["c1"], [f"c{i}" for i in range(2, 1002)]),
    Case("csv-quote-closed-mid-field", "c.csv", CSV_HEADER + csv_rows(["c1"])
         + '0,Q1,c9,q,"stray. b,1\r\n' + csv_rows(["c2", "c3"]),
         3, "a quote closes in the middle of a field", ["c1"], ["c2", "c3"]),
    Case("csv-short-row", "c.csv", CSV_HEADER + csv_rows(["c1"]) + "0,Q1\r\n" + csv_rows(["c2"]),
         3, "expected 6 comma-separated fields, found 2", ["c1"], ["c2"]),
    Case("csv-long-row", "c.csv", CSV_HEADER + csv_rows(["c1"]) + "0,Q1,c9,q,t. b,1,x\r\n"
         + csv_rows(["c2"]), 3, "found 7", ["c1"], ["c2"]),
    Case("csv-empty-id", "c.csv", CSV_HEADER + csv_rows(["c1"]) + "0,Q1, ,q,t. b,1\r\n"
         + csv_rows(["c2"]), 3, "empty question2_id", ["c1"], ["c2"]),
    Case("csv-nul-in-id", "c.csv", CSV_HEADER + csv_rows(["c1"]) + "0,Q1,c\x009,q,t. b,1\r\n"
         + csv_rows(["c2"]), 3, "control character", ["c1"], ["c2"]),
    Case("csv-wrong-header", "c.csv", "a,b,c\r\n" + csv_rows(["c1"]),
         1, "a SemEval subtask B CSV question2_id", []),
    Case("csv-gz-bare-cr", "c.csv.gz", gz(CSV_HEADER + csv_rows(["c1"]) + "0,Q1,c9,q,t\r. b,1\n"
         + csv_rows(["c2"])), 3, "bare carriage return", ["c1"], ["c2"]),
    truncated_gzip("c.csv.gz", [CSV_HEADER, *csv_rows(many("c")).splitlines(keepends=True)],
                   lambda line: line.split(",")[2], header_lines=1),
    bad_deflate("c.csv.gz", CSV_HEADER + csv_rows(many("c"))),
    # issue 34: a line over 1,000,000 characters is a bad record, never read whole
    Case("au-long-line", "c.txt", askubuntu(["a1"]) + f"a9\t{LONG_TEXT}\tb\n" + askubuntu(["a2"]),
         2, TOO_LONG, ["a1"], ["a2"]),
    Case("au-gz-long-line", "c.txt.gz",
         gz(askubuntu(["a1"]) + f"a9\t{LONG_TEXT}\tb\n" + askubuntu(["a2"])),
         2, TOO_LONG, ["a1"], ["a2"]),
    Case("tsv-long-line", "c.tsv", TSV_HEADER + tsv(["t1"]) + f"t9\t{LONG_TEXT}\tb\tx\n"
         + tsv(["t2"]), 3, TOO_LONG, ["t1"], ["t2"]),
    Case("jsonl-long-line", "c.jsonl", jsonl(["j1"]) + json.dumps({"id": "j9", "title": LONG_TEXT})
         + "\n" + jsonl(["j2"]), 2, TOO_LONG, ["j1"], ["j2"]),
    Case("jsonl-gz-long-line", "c.jsonl.gz", gz(jsonl(["j1"]) + json.dumps({"id": "j9", "body": "b"
         + LONG_TEXT}) + "\n" + jsonl(["j2"])), 2, TOO_LONG, ["j1"], ["j2"]),
    Case("csv-long-line", "c.csv", CSV_HEADER + csv_rows(["c1"])
         + f'0,Q1,c9,q,"{LONG_TEXT}. b",1\r\n' + csv_rows(["c2"]), 3, TOO_LONG, ["c1"], ["c2"]),
    # UTF-16 text is named as such (it used to be read as ids full of NULs)
    Case("au-utf16", "c.txt", askubuntu(["a1", "a2"]).encode("utf-16"), 1, "UTF-16", []),
    Case("tsv-gz-utf16", "c.tsv.gz", gz((TSV_HEADER + tsv(["t1"])).encode("utf-16-le")),
         1, "convert it to UTF-8", []),
    # ids no backend can address (over 512 bytes) are refused like any bad id
    Case("au-long-id", "c.txt", askubuntu(["a1"]) + "x" * 513 + "\tt\tb\n" + askubuntu(["a2"]),
         2, "is longer than 512 bytes", ["a1"], ["a2"]),
    Case("jsonl-long-id", "c.jsonl", jsonl(["j1"]) + json.dumps({"id": "é" * 257, "title": "t"})
         + "\n" + jsonl(["j2"]), 2, "is longer than 512 bytes", ["j1"], ["j2"]),
    Case("jsonl-string-left-open", "c.jsonl", jsonl(["j1"]) + '{"id": "j9", "title": "open\n'
         + jsonl(["j2"]), 2, "(Invalid control character at column 28)", ["j1"], ["j2"]),
]  # fmt: skip


def test_the_suite_covers_every_reader_plain_and_gzipped():
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)
    suffixes = {c.name.removeprefix("c") for c in CASES}
    for fmt in ("txt", "tsv", "jsonl", "xml", "csv"):
        assert {f".{fmt}", f".{fmt}.gz"} <= suffixes


@pytest.fixture(scope="module")
def base_index(tmp_path_factory):
    """An index holding BASE, built once and copied for each case."""
    from click.testing import CliRunner

    from qres.cli import cli

    root = tmp_path_factory.mktemp("base")
    corpus = root / "base.tsv"
    corpus.write_text(TSV_HEADER + tsv(BASE))
    result = CliRunner().invoke(cli, ["--index-dir", str(root / "ix"), "index", str(corpus)])
    assert result.exit_code == 0, result.output
    return root / "ix"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_malformed_input_through_qres_index(run, tmp_path, base_index, case):
    path = tmp_path / case.name
    path.write_bytes(case.data.encode("utf-8") if isinstance(case.data, str) else case.data)
    ix = tmp_path / "ix"
    shutil.copytree(base_index, ix)

    result = run("--index-dir", ix, "index", path, "--add-to-existing")  # beside base.tsv
    assert result.exit_code == 1, result.output
    [line] = result.output.strip().splitlines()  # one line, never a traceback
    assert line.startswith(f"error: {path}:{case.line}: "), line
    assert case.problem in line
    assert_holds(ix, BASE + case.before)

    result = run("--index-dir", ix, "--json", "index", path, "--skip-bad", "--add-to-existing")
    if case.after is None:  # no record boundary after the failure: --skip-bad cannot go on
        assert result.exit_code == 1, result.output
        assert result.output.strip().splitlines() == [line]
        assert_holds(ix, BASE + case.before)
    else:
        assert result.exit_code == 0, result.output
        summary = json.loads(result.output)
        assert summary["skipped"] == case.skipped
        assert case.problem in summary["skipped_examples"][0]
        assert_holds(ix, BASE + case.before + case.after)


def assert_holds(index_dir, ids: list[str]) -> None:
    backend = EmbeddedBackend(index_dir)
    try:
        assert backend.count() == len(ids)
        assert set(backend.fetch(ids)) == set(ids)
    finally:
        backend.close()
