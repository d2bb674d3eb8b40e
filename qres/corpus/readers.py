"""Streaming readers for forum question corpora (what ``qres index`` takes).

Formats, chosen by ``fmt`` or detected from the file name and first line:

* ``askubuntu`` — ``id<TAB>title<TAB>body``, no header (``text_tokenized.txt.gz``);
* ``tsv`` — a header row naming ``id``, ``title``, ``body`` and optionally ``tags``
  (comma-separated) and the display fields of :data:`KNOWN_EXTRAS` (``answer_count``, ...);
* ``csv`` — a CSV file (read by the csv module: quoted fields may hold commas and
  newlines) whose header names the ``tsv`` format's columns;
* ``jsonl`` — one object a line with ``id``, ``title``, ``body`` and optional ``tags``
  (a list or a comma-separated string), the keys of :data:`KNOWN_EXTRAS` and ``extras``
  (an object of further display fields);
* ``semeval-xml`` — SemEval-2016/2017 Task 3 XML: every related question (``RelQuestion``);
* ``semeval-csv`` — the SemEval-2016 subtask B train-part-1 CSV: every ``question2``;
* ``stackexchange`` — a StackExchange data dump's ``Posts.xml``: every question, its HTML
  body as text, score, answer count, accepted answer and closed date in ``extras``
  (:mod:`qres.corpus.stackexchange`); an ``.xml`` file whose root is ``<posts>``.

Any of them may be gzipped (``.gz``). Files are read line by line (XML incrementally), never
whole, and no line is ever held whole beyond :data:`MAX_LINE_CHARS` characters: a longer one
is a malformed record, its rest skipped unread into memory. A file (or pipe; ``-`` is standard
input) is read once: format detection reads its first bytes, which the reader then gets
again. UTF-16 text is refused at its first line (convert it to UTF-8), a zip archive or a
folder in one line. A malformed record raises
:class:`CorpusError` naming file, line and problem unless ``skip_bad`` is set, in which case
it is counted in :class:`ReadStats` and skipped. A failure with no record boundary after it —
an unreadable or truncated gzip stream, a bad header, malformed XML, a CSV quote left open to
the end of the file — always raises, after every good record before it has been yielded.

Ids must be strings (JSONL also takes integers) without control characters and at most
:data:`MAX_ID_BYTES` bytes long (the same limit everywhere: backends and service); in text fields
(title, body, tags) control characters other than tab and newline — NUL, escape sequences'
ESC, carriage return — become spaces, so nothing read is later printed raw to a terminal.
"""

from __future__ import annotations

import csv
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from qres.corpus import stackexchange
from qres.corpus.files import (
    FORMATS,
    MAX_LINE_CHARS,
    CorpusError,
    first_line,
    head_text,
    numbered_lines,
    open_text,
    too_long,
    xml_pieces,
)

_REPLACED = "\ufffd"  # what open_text makes of bytes that are not UTF-8

# A forum question is a few KB at most; anything longer is cut so one pathological line
# cannot blow up memory or the index.
MAX_FIELD_CHARS = 20_000
# Long CSV fields are cut by _clean; one longer than a line may be is a bad record.
csv.field_size_limit(MAX_LINE_CHARS)
# The longest question id (UTF-8) every backend can address: Elasticsearch's _id limit
# (tantivy's terms allow 65,530 bytes). Readers, the Python API and the service all check it.
MAX_ID_BYTES = 512

# What a forum shows beside a question, stored but never ranked on (``Question.extras``): the
# keys a StackExchange dump gives, and their kinds. A TSV column or JSONL key of one of these
# names fills it; JSONL's ``extras`` object may add others (integer or string values).
KNOWN_EXTRAS = dict(stackexchange.EXTRAS.values()) | {
    stackexchange.DUPLICATE_OF: str,  # closed as a duplicate of (qres.corpus.duplicate_links)
    stackexchange.DUPLICATE_DATES: str,
}
MAX_EXTRAS = 20  # display fields per question
MAX_EXTRA_KEY_CHARS = 64

_JSON_LINES = "qres reads JSON Lines, one object per line"

# C0/C1 control characters (terminal escapes start with ESC) and lone surrogates, which
# cannot be stored as UTF-8; text fields keep tab and newline.
_ID_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass(frozen=True)
class Question:
    id: str
    title: str
    body: str
    tags: tuple[str, ...] = ()
    # Shown beside the question, never ranked on (a dump's score, answer count, ...).
    extras: Mapping[str, int | str] = field(default_factory=dict, compare=False)

    @property
    def text(self) -> str:
        return f"{self.title} {self.body}".strip()


@dataclass
class ReadStats:
    read: int = 0
    skipped: int = 0
    truncated: int = 0
    empty: int = 0
    undecodable: int = 0  # questions holding U+FFFD, what bytes that are not UTF-8 become
    first_undecodable: str | None = None  # "file:line" of the first
    problems: list[str] = field(default_factory=list)  # the first few skipped records


def detect_format(path: str | Path) -> str:
    """The format of ``path``, from its name and first bytes (read once: a pipe's reader
    gets them again)."""
    path = Path(path)
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith(".csv"):  # SemEval's CSV by its header, else a question CSV
        header = next(csv.reader([first_line(path)]), [])
        return "semeval-csv" if _SEMEVAL_CSV_COLUMNS.issubset(header) else "csv"
    if name.endswith(".xml"):
        head = head_text(path, 4096, first_line=False)[:4096]
        return "stackexchange" if stackexchange.looks_like_posts(head) else "semeval-xml"
    columns = [c.strip() for c in first_line(path).rstrip("\r").split("\t")]
    names = {c.lower() for c in columns}
    if "id" in names:  # a header names id, in any column
        return "tsv"
    # A line naming title or body without a number (an id, in a line of data) is a header:
    # read as AskUbuntu lines it would be indexed as a question.
    if names & {"title", "body"} and not any(c.isdigit() for c in columns):
        found = _columns_found(columns)
        raise CorpusError(
            path, 1, f"a header without an id column (found {found}): name the id column `id`"
        )
    return "askubuntu"


def read_corpus(
    path: str | Path,
    fmt: str | None = None,
    skip_bad: bool = False,
    stats: ReadStats | None = None,
) -> Iterator[Question]:
    """Yield the questions of ``path`` one at a time (duplicates are left to the caller)."""
    fmt = fmt or detect_format(path)
    readers = {
        "askubuntu": _read_askubuntu,
        "tsv": _read_tsv,
        "csv": _read_csv,
        "jsonl": _read_jsonl,
        "semeval-xml": _read_semeval_xml,
        "semeval-csv": _read_semeval_csv,
        "stackexchange": _read_stackexchange,
    }
    if fmt not in readers:
        raise CorpusError(path, None, f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    stats = stats if stats is not None else ReadStats()
    for line, record in readers[fmt](Path(path)):
        try:
            if isinstance(record, str):
                raise ValueError(record)
            question = _clean(record, stats)
        except ValueError as err:
            error = CorpusError(path, line, str(err))
            if not skip_bad:
                raise error from None
            stats.skipped += 1
            if len(stats.problems) < 10:
                stats.problems.append(str(error))
            continue
        stats.read += 1
        if _REPLACED in question.title or _REPLACED in question.body:
            stats.undecodable += 1
            stats.first_undecodable = stats.first_undecodable or f"{path}:{line}"
        yield question


def id_problem(qid: str) -> str | None:
    """Why ``qid`` cannot be a question id (empty, "." or ".." (a page's URL would read it
    as its folder or the parent), a control character or lone surrogate, longer than
    :data:`MAX_ID_BYTES`), or None."""
    if not qid.strip():
        return "empty id"
    if qid in (".", ".."):
        return f"id {qid!r} cannot name a page in a URL"
    if not qid.isprintable() and _ID_UNSAFE.search(qid):
        return f"id {qid[:80]!r} contains a control character or a lone surrogate"
    if len(qid) > MAX_ID_BYTES // 4 and len(qid.encode()) > MAX_ID_BYTES:
        return f"id {qid[:40]!r}... is longer than {MAX_ID_BYTES} bytes"
    return None


def _clean(q: Question, stats: ReadStats) -> Question:
    problem = id_problem(q.id)
    if problem:
        raise ValueError(problem)
    title, body = _clean_text(q.title).strip(), _clean_text(q.body).strip()
    if not title and not body:
        stats.empty += 1
        raise ValueError(f"question {q.id!r} has an empty title and body")
    if len(title) > MAX_FIELD_CHARS or len(body) > MAX_FIELD_CHARS:
        stats.truncated += 1
        title, body = title[:MAX_FIELD_CHARS], body[:MAX_FIELD_CHARS]
    tags = q.tags and tuple(t for t in (_clean_text(t).strip() for t in q.tags) if t)
    return Question(q.id, title, body, tags, q.extras)


def extras_of(values: Mapping) -> dict[str, int | str]:
    """``values`` checked as a question's extras: string keys; integer or string values (the
    integer fields of :data:`KNOWN_EXTRAS` integers, a digit string taken as one; its string
    fields strings, an integer taken as its digits); None and "" left out. Raises ValueError
    naming the bad field."""
    extras: dict[str, int | str] = {}
    for key, value in values.items():
        if value is None or value == "":
            continue
        if not isinstance(key, str) or not key or len(key) > MAX_EXTRA_KEY_CHARS:
            raise ValueError(
                f"extras key {str(key)[:80]!r} must be 1-{MAX_EXTRA_KEY_CHARS} characters"
            )
        kind = KNOWN_EXTRAS.get(key)
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"{key!r} must be a whole number or a string, not {value!r:.80}")
        if kind is int and isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ValueError(f"{key!r}: {value!r:.80} is not a whole number") from None
        elif kind is str and isinstance(value, int):
            value = str(value)
        extras[key] = _clean_text(value)[:MAX_FIELD_CHARS] if isinstance(value, str) else value
    if len(extras) > MAX_EXTRAS:
        raise ValueError(f"more than {MAX_EXTRAS} extras")
    return extras


def _columns_found(columns: list[str]) -> str:
    """A header's columns for a one-line error: runs of whitespace (a quoted name may hold a
    line break) as one space, at most 200 characters."""
    return " ".join(_clean_text(", ".join(columns)).split())[:200] or "no columns"


def _clean_text(text: str) -> str:
    if text.isprintable():  # the common case, checked at C speed
        return text
    return _SURROGATE.sub("\ufffd", _TEXT_CONTROL.sub(" ", text))


def split_tags(value) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list):
        raise ValueError(f"tags must be a list or a comma-separated string, got {value!r}")
    if not all(isinstance(t, str) for t in value):
        raise ValueError("tags must be strings")
    return tuple(t.strip() for t in value if t.strip())


def _read_askubuntu(path: Path):
    with open_text(path) as f:
        for n, line in numbered_lines(path, f):
            if line is None:
                yield n, too_long()
                continue
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) not in (2, 3):
                yield n, f"expected 3 tab-separated fields (id, title, body), found {len(parts)}"
                continue
            qid, title = parts[0].strip(), parts[1]
            body = parts[2] if len(parts) == 3 else ""
            yield n, Question(qid, title, body)


# What a TSV row cannot hold, said where a row has the wrong number of fields.
_TSV_LIMITS = "(TSV fields cannot hold tabs or newlines: a CSV or JSONL file can)"
# What a .csv file's header is for either CSV format, said where it is neither.
_CSV_HEADERS = (
    "a question CSV names id, title, body [, tags], a SemEval subtask B CSV question2_id, question2"
)
_SEMEVAL_CSV_COLUMNS = {"question2_id", "question2"}


def _header(path: Path, names: list[str], also: str = "", line: int = 1) -> dict[str, int]:
    """Where a TSV or question CSV header of ``names`` has id, title, body, tags and the
    display fields of :data:`KNOWN_EXTRAS`; without id, title and body it is refused at its
    ``line`` naming the columns found (and ``also``)."""
    columns = [name.strip().lower() for name in names]
    missing = {"id", "title", "body"} - set(columns)
    if missing:
        found = _columns_found(columns)
        lacks = ", ".join(sorted(missing))
        raise CorpusError(path, line, f"header lacks column(s) {lacks} (found {found}{also})")
    wanted = ("id", "title", "body", "tags", *KNOWN_EXTRAS)
    return {name: columns.index(name) for name in wanted if name in columns}


def _row_question(parts: list[str], where: dict[str, int]) -> Question | str:
    """A TSV or question CSV row as a question, or what is wrong with it."""
    try:
        tags = split_tags(parts[where["tags"]]) if "tags" in where else ()
        extras = extras_of({k: parts[i].strip() for k, i in where.items() if k in KNOWN_EXTRAS})
    except ValueError as err:
        return str(err)
    qid, title, body = (parts[where[k]] for k in ("id", "title", "body"))
    return Question(qid.strip(), title, stackexchange.body_text(body), tags, extras)


def _read_tsv(path: Path):
    with open_text(path) as f:
        lines = numbered_lines(path, f)
        at, header = 1, ""
        for at, header in lines:  # the first line that is not blank
            if header is None:
                raise CorpusError(path, at, f"the header: {too_long()}")
            if header.strip():
                break
        if not header.strip():  # an empty file: no questions
            return
        names = header.rstrip("\r\n").split("\t")
        where = _header(path, names, line=at)
        for n, line in lines:
            if line is None:
                yield n, too_long()
                continue
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            found = len(parts)
            if found != len(names):
                yield n, f"expected {len(names)} tab-separated fields, found {found} {_TSV_LIMITS}"
                continue
            yield n, _row_question(parts, where)


def _read_csv(path: Path):
    """A question CSV: the TSV format's columns, read by the csv module, so quoted fields may
    hold commas, quotes and newlines. A bad row is reported at the line it starts on; a quote
    left open to the end of the file stops the reading there (the rest was read into it)."""
    long: list[int] = []  # the lines too long to hold, each read as an empty line
    with open_text(path) as f:
        rows = csv.reader(_csv_text(numbered_lines(path, f), long), strict=True)
        header: list[str] = []
        at = 1  # the line the header starts on
        try:
            while not "".join(header).strip() and not long:  # the first row not blank
                at = rows.line_num + 1
                header = next(rows, None)
                if header is None:  # an empty file: no questions, as an empty TSV is
                    return
        except csv.Error as err:
            raise CorpusError(path, at, f"the header: {_csv_problem(err)}") from None
        if long:
            raise CorpusError(path, long[0], f"the header: {too_long()}")
        where = _header(path, header, f"; {_CSV_HEADERS}", line=at)
        while True:
            start = rows.line_num + 1
            try:
                row = next(rows)
            except StopIteration:
                return
            except csv.Error as err:
                if str(err) == "unexpected end of data":  # nothing is left to read on from
                    raise CorpusError(path, start, _csv_problem(err)) from None
                yield start, _csv_problem(err)
                continue
            lines = rows.line_num - start + 1
            if long and long[-1] >= start:
                yield long[-1], too_long()
            elif not "".join(row).strip():  # a blank row, as a spreadsheet may end with
                continue
            elif len(row) != len(header):
                over = f" (a record of {lines} lines: a stray quote?)" if lines > 1 else ""
                problem = f"expected {len(header)} comma-separated fields, found {len(row)}"
                yield start, problem + over
            else:
                yield start, _row_question(row, where)


def _csv_text(lines: Iterator[tuple[int, str | None]], long: list[int]) -> Iterator[str]:
    """The text of ``lines`` for the csv module; a line too long to hold is noted in ``long``
    and read as an empty one."""
    for n, text in lines:
        if text is None:
            long.append(n)
        yield "\n" if text is None else text


_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    bool: "a boolean",
    float: "a non-integer number",
}


def _read_jsonl(path: Path):
    with open_text(path) as f:
        for n, line in numbered_lines(path, f):
            if line is None:
                yield n, too_long()
                continue
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                # some messages end in "at" ("Unterminated string starting at"): said once
                problem = f"invalid JSON ({err.msg.removesuffix(' at')} at column {err.colno})"
                # an object that goes on past its line: a pretty-printed file
                ends = err.pos >= len(line.rstrip())
                yield n, f"{problem}: {_JSON_LINES}" if ends else problem
                continue
            except RecursionError:
                yield n, "invalid JSON (nested too deeply)"
                continue
            except ValueError:  # Python refuses integers of more than 4,300 digits
                yield n, "invalid JSON (a number with too many digits)"
                continue
            if not isinstance(obj, dict):
                yield n, f"expected a JSON object: {_JSON_LINES}"
                continue
            qid = obj.get("id")
            if qid is None:
                yield n, "missing key 'id'" if "id" not in obj else "'id' is null"
                continue
            if not isinstance(qid, str | int) or isinstance(qid, bool):
                yield n, f"'id' must be a string or an integer, not {_JSON_TYPES[type(qid)]}"
                continue
            title, body = obj.get("title"), obj.get("body")
            title, body = "" if title is None else title, "" if body is None else body
            if not isinstance(title, str) or not isinstance(body, str):
                yield n, "'title' and 'body' must be strings"
                continue
            try:
                tags = split_tags(obj.get("tags"))
                extras = {} if obj.get("extras") is None else obj["extras"]
                if not isinstance(extras, dict):
                    raise ValueError("'extras' must be an object")
                extras = extras_of({**extras, **{k: obj[k] for k in KNOWN_EXTRAS if k in obj}})
            except ValueError as err:
                yield n, str(err)
                continue
            yield n, Question(str(qid).strip(), title, stackexchange.body_text(body), tags, extras)


def _read_semeval_xml(path: Path):
    """Every RelQuestion of a SemEval Task 3 file, once each (they repeat across originals).

    The parser is fed a line at a time so that each record is reported at the line its
    ``<RelQuestion>`` tag is on.
    """
    seen: set[str] = set()
    parser = ET.XMLPullParser(events=("start", "end"))
    record_line = 1
    try:
        for n, event, elem in stackexchange.xml_events(parser, xml_pieces(path)):
            if event == "start":
                if elem.tag == "RelQuestion":
                    record_line = n
                continue
            if elem.tag == "OrgQuestion":
                elem.clear()  # its threads and comments are done with
            if elem.tag != "RelQuestion":
                continue
            qid = elem.get("RELQ_ID", "").strip()
            if not qid:
                yield record_line, "a RelQuestion without a RELQ_ID"
            elif qid not in seen:
                seen.add(qid)
                tags = split_tags(elem.get("RELQ_TAGS")) or split_tags(elem.get("RELQ_CATEGORY"))
                subject = elem.findtext("RelQSubject") or ""
                yield (
                    record_line,
                    Question(qid, subject, elem.findtext("RelQBody") or "", tags),
                )
            elem.clear()
        parser.close()
    except ET.ParseError as err:
        # expat cannot go on after an error: nothing after it can be read.
        raise CorpusError(path, err.position[0], f"malformed XML ({err})") from None
    except stackexchange.MalformedXML as err:
        raise CorpusError(path, err.line, str(err)) from None


def _read_stackexchange(path: Path):
    try:
        for n, record in stackexchange.read_posts(xml_pieces(path)):
            yield n, record if isinstance(record, str) else Question(**record)
    except stackexchange.MalformedXML as err:
        raise CorpusError(path, err.line, str(err)) from None


def _read_semeval_csv(path: Path):
    """question2 of the subtask B train-part-1 CSV.

    The file joins subject and body with ". "; they are split back at the first one. It has
    one row a line, so a bad record that runs over several lines is a stray quote joining
    rows: it is reported at the line it starts on and reading goes on (with ``skip_bad``)
    from the next line, so the quote cannot swallow the rows after it.
    """
    seen: set[str] = set()
    first = 2
    while first:
        first = yield from _semeval_csv_from(path, first, seen)


def _semeval_csv_from(path: Path, first: int, seen: set[str]):
    """The records from line ``first`` on; returns the line to read on from after a bad
    record that ran over several lines, or None at the end of the file."""
    with open_text(path) as f:
        rows = csv.reader(_csv_lines(numbered_lines(path, f), first), strict=True)
        try:
            header = next(rows, [])
        except csv.Error as err:
            raise CorpusError(path, 1, f"malformed CSV header ({err})") from None
        except _LongLine:
            raise CorpusError(path, 1, f"the header: {too_long()}") from None
        if not _SEMEVAL_CSV_COLUMNS.issubset(header) or rows.line_num != 1:
            raise CorpusError(
                path, 1, "expected the SemEval subtask B CSV header (question2_id, question2, ...)"
            )
        id_at, text_at = header.index("question2_id"), header.index("question2")
        skipped = first - 2  # lines left out after the header
        while True:
            start = rows.line_num + skipped + 1
            try:
                row = next(rows)
                problem = None
            except StopIteration:
                return None
            except csv.Error as err:
                row, problem = None, _csv_problem(err)
            except _LongLine as err:
                yield err.line, too_long()
                return err.line + 1
            end = rows.line_num + skipped
            if row is not None and not row:
                continue
            if row is not None and len(row) != len(header):
                problem = f"expected {len(header)} comma-separated fields, found {len(row)}"
            if problem is not None:
                if end > start:
                    yield start, f"{problem} (a stray quote joined lines {start}-{end})"
                    return start + 1
                yield start, problem
                continue
            qid = row[id_at].strip()
            if not qid:
                yield start, "empty question2_id"
            elif qid not in seen:
                seen.add(qid)
                title, _, body = row[text_at].partition(". ")
                yield start, Question(qid, title, body)


class _LongLine(Exception):
    """A CSV line longer than :data:`MAX_LINE_CHARS`, at ``line``."""

    def __init__(self, line: int):
        super().__init__(line)
        self.line = line


def _csv_lines(lines: Iterator[tuple[int, str | None]], first: int) -> Iterator[str]:
    """The text of line 1 and of the lines from ``first`` on, for the csv module."""
    for n, text in lines:
        if n == 1 or n >= first:
            if text is None:
                raise _LongLine(n)
            yield text


def _csv_problem(err: csv.Error) -> str:
    problem = str(err)
    if problem == "unexpected end of data":
        return "a quote opened in this record is never closed"
    if problem.startswith("new-line character seen in unquoted field"):
        return "a bare carriage return (\\r) inside an unquoted field"
    if "expected after" in problem:
        return f"a quote closes in the middle of a field ({problem})"
    return f"malformed CSV ({problem})"
