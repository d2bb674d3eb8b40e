"""Streaming readers for forum question corpora (what ``qres index`` takes).

Formats, chosen by ``fmt`` or detected from the file name and first line:

* ``askubuntu`` — ``id<TAB>title<TAB>body``, no header (``text_tokenized.txt.gz``);
* ``tsv`` — a header row naming ``id``, ``title``, ``body`` and optionally ``tags``
  (comma-separated) and the display fields of :data:`KNOWN_EXTRAS` (``answer_count``, ...);
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
import gzip
import io
import json
import re
import sys
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from qres.corpus import stackexchange

# A forum question is a few KB at most; anything longer is cut so one pathological line
# cannot blow up memory or the index.
MAX_FIELD_CHARS = 20_000
# A line longer than this is refused as a bad record without ever being held whole (one
# 4 GB line of a small .gz must not take 4 GB): far above any question's id, title and body.
MAX_LINE_CHARS = 1_000_000
# Long CSV fields are cut by _clean; one longer than a line may be is a bad record.
csv.field_size_limit(MAX_LINE_CHARS)
# The longest question id (UTF-8) every backend can address: Elasticsearch's _id limit
# (tantivy's terms allow 65,530 bytes). Readers, the Python API and the service all check it.
MAX_ID_BYTES = 512
_HEAD_BYTES = 1 << 16  # what format detection reads at most

# What a forum shows beside a question, stored but never ranked on (``Question.extras``): the
# keys a StackExchange dump gives, and their kinds. A TSV column or JSONL key of one of these
# names fills it; JSONL's ``extras`` object may add others (integer or string values).
KNOWN_EXTRAS = dict(stackexchange.EXTRAS.values()) | {
    stackexchange.DUPLICATE_OF: str,  # closed as a duplicate of (qres.corpus.duplicate_links)
    stackexchange.DUPLICATE_DATES: str,
}
MAX_EXTRAS = 20  # display fields per question
MAX_EXTRA_KEY_CHARS = 64

FORMATS = ("askubuntu", "tsv", "jsonl", "semeval-xml", "semeval-csv", "stackexchange")
STDIN = "-"  # the corpus path that reads standard input
_ZIP = ("PK\x03\x04", "PK\x05\x06")  # how a zip archive (or an empty one) begins
_READS = f"{', '.join(FORMATS)}; plain or .gz"
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


class CorpusError(ValueError):
    """A malformed input record; the message is ``file:line: problem``."""

    def __init__(self, path: str | Path, line: int | None, problem: str):
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")
        self.path, self.line, self.problem = str(path), line, problem


@dataclass
class ReadStats:
    read: int = 0
    skipped: int = 0
    truncated: int = 0
    empty: int = 0
    problems: list[str] = field(default_factory=list)  # the first few skipped records


# A pipe's first bytes, read by format detection, for the next open of the same path to read
# again (a pipe cannot be read twice): {path: (bytes read, the stream)}.
_peeked: dict[str, tuple[bytes, io.BufferedIOBase]] = {}


class _Replayed(io.RawIOBase):
    """The bytes already read from a stream, then the rest of it."""

    def __init__(self, head: bytes, rest: io.BufferedIOBase):
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n], self._head = self._head[:n], self._head[n:]
            return n
        data = self._rest.read1(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._rest.close()
        super().close()


def _open_bytes(path: Path) -> io.BufferedIOBase:
    """The file's bytes (gunzipped for .gz); a pipe that detection read from replays that."""
    peeked = _peeked.pop(str(path), None)
    if peeked is not None:
        return io.BufferedReader(_Replayed(*peeked))
    if str(path) == STDIN:
        return sys.stdin.buffer
    if path.is_dir():
        dump = [path / n for n in ("Posts.xml", "Posts.xml.gz") if (path / n).is_file()]
        give = f"give {dump[0]}" if dump else "give a corpus file in it"
        raise CorpusError(path, None, f"a folder, not a file: {give}")
    if not path.exists():
        raise CorpusError(path, None, "file not found")
    try:
        return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # noqa: SIM115
    except OSError as err:
        raise CorpusError(path, None, f"cannot read the file ({err.strerror or err})") from None


def open_text(path: str | Path) -> io.TextIOBase:
    """Open a plain or gzipped text file; undecodable bytes become U+FFFD, never an error."""
    # utf-8-sig drops the byte-order mark spreadsheet tools write; lines end at \n only, so
    # a stray \r inside a field neither splits a record nor shifts reported line numbers.
    return io.TextIOWrapper(
        _open_bytes(Path(path)), encoding="utf-8-sig", errors="replace", newline="\n"
    )


def _head(path: Path, enough: int, first_line: bool) -> str:
    """The file's first ``enough`` bytes as text (or its first line, if ``first_line``; at
    most :data:`_HEAD_BYTES`), for format detection. A pipe is read once: what is read here
    is kept for the next :func:`open_text` of the same path to read again."""
    raw = _open_bytes(path)
    head = b""
    try:
        while len(head) < min(enough, _HEAD_BYTES) and not (first_line and b"\n" in head):
            piece = raw.read1(8192)
            if not piece:
                break
            head += piece
    except (OSError, EOFError, zlib.error) as err:
        if not head:  # else the reader meets it again, after the lines before it
            raw.close()
            raise CorpusError(path, 1, _unreadable(err)) from None
    if path.is_file():
        raw.close()
    else:
        _peeked[str(path)] = (head, raw)
    return head.decode("utf-8-sig", errors="replace")


def _lines(path: str | Path, f: io.TextIOBase, size: int = -1) -> Iterator[tuple[int, str | None]]:
    """``(line number, text)`` for each line of ``f`` (pieces of at most ``size`` characters
    when given). A line longer than :data:`MAX_LINE_CHARS` comes as ``(line number, None)``
    and is never held whole: if reading goes on, the rest of it is skipped a piece at a time.
    A stream that cannot be read on — a corrupt or truncated gzip file, an I/O error —
    raises :class:`CorpusError` at the line it stops in, after every line before it; so does
    UTF-16 text, at its first line."""
    limit = size if size > 0 else MAX_LINE_CHARS + 1
    n, first = 1, True
    while True:
        text = _read_line(path, n, f, limit)
        if not text:
            return
        if first and text.startswith(_ZIP):  # before UTF-16: its header may hold many NULs
            raise CorpusError(path, None, f"a zip archive: unzip it (qres reads {_READS})")
        if first and _looks_utf16(text):
            raise CorpusError(
                path, 1, "the file is UTF-16 text: convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)"
            )
        first = False
        if size <= 0 and len(text) > MAX_LINE_CHARS and not text.endswith("\n"):
            yield n, None
            while text and not text.endswith("\n"):  # only if the caller reads on
                text = _read_line(path, n, f, 1 << 20)
            n += 1
            continue
        yield n, text
        n += text.endswith("\n")


def _read_line(path: str | Path, n: int, f: io.TextIOBase, limit: int) -> str:
    try:
        return f.readline(limit)
    except (OSError, EOFError, zlib.error) as err:
        raise CorpusError(path, n, _unreadable(err)) from None


def _looks_utf16(text: str) -> bool:
    """Whether the start of a file read as UTF-8 is UTF-16 text: a NUL byte beside each
    ASCII character (a quarter to three fifths of the characters: all NULs is not text)."""
    sample = text[:4096]
    return len(sample) > 1 and len(sample) <= sample.count("\x00") * 4 <= len(sample) * 12 // 5


def xml_pieces(path: str | Path) -> Iterator[tuple[int, str]]:
    """The text of an XML file in pieces of at most 64K characters, each with its line, for
    :func:`qres.corpus.stackexchange.xml_events`; an unreadable stream raises
    :class:`CorpusError` at its line."""
    with open_text(path) as f:
        yield from _lines(path, f, size=1 << 16)


def _too_long() -> str:
    return f"the line is longer than {MAX_LINE_CHARS:,} characters: not a forum question"


def _unreadable(err: Exception) -> str:
    if isinstance(err, EOFError):
        return "the gzip file is truncated: it ends before its end-of-stream marker"
    if isinstance(err, gzip.BadGzipFile):
        return f"not a valid gzip file ({err})"
    if isinstance(err, zlib.error):
        return f"corrupt gzip data ({err})"
    return f"cannot read the file ({getattr(err, 'strerror', None) or err})"


def detect_format(path: str | Path) -> str:
    """The format of ``path``, from its name and first bytes (read once: a pipe's reader
    gets them again)."""
    path = Path(path)
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith(".csv"):
        return "semeval-csv"
    if name.endswith(".xml"):
        head = _head(path, 4096, first_line=False)[:4096]
        return "stackexchange" if stackexchange.looks_like_posts(head) else "semeval-xml"
    first_line = _head(path, _HEAD_BYTES, first_line=True).split("\n", 1)[0]
    columns = [c.strip() for c in first_line.rstrip("\r").split("\t")]
    names = {c.lower() for c in columns}
    if "id" in names:  # a header names id, in any column
        return "tsv"
    # A line naming title or body without a number (an id, in a line of data) is a header:
    # read as AskUbuntu lines it would be indexed as a question.
    if names & {"title", "body"} and not any(c.isdigit() for c in columns):
        found = _clean_text(", ".join(columns))[:200]
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


def _clean_text(text: str) -> str:
    if text.isprintable():  # the common case, checked at C speed
        return text
    return _SURROGATE.sub("\ufffd", _TEXT_CONTROL.sub(" ", text))


def _split_tags(value) -> tuple[str, ...]:
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
        for n, line in _lines(path, f):
            if line is None:
                yield n, _too_long()
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


def _read_tsv(path: Path):
    with open_text(path) as f:
        lines = _lines(path, f)
        _, header = next(lines, (1, ""))
        if header is None:
            raise CorpusError(path, 1, f"the header: {_too_long()}")
        columns = [h.strip().lower() for h in header.rstrip("\r\n").split("\t")]
        missing = {"id", "title", "body"} - set(columns)
        if missing:
            raise CorpusError(path, 1, f"header lacks column(s) {', '.join(sorted(missing))}")
        where = {
            name: columns.index(name) for name in ("id", "title", "body", "tags") if name in columns
        }
        extra_columns = {name: columns.index(name) for name in KNOWN_EXTRAS if name in columns}
        for n, line in lines:
            if line is None:
                yield n, _too_long()
                continue
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != len(columns):
                yield n, f"expected {len(columns)} tab-separated fields, found {len(parts)}"
                continue
            try:
                tags = _split_tags(parts[where["tags"]]) if "tags" in where else ()
                extras = extras_of({k: parts[i].strip() for k, i in extra_columns.items()})
            except ValueError as err:
                yield n, str(err)
                continue
            qid, title, body = (parts[where[k]] for k in ("id", "title", "body"))
            yield n, Question(qid.strip(), title, body, tags, extras)


_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    bool: "a boolean",
    float: "a non-integer number",
}


def _read_jsonl(path: Path):
    with open_text(path) as f:
        for n, line in _lines(path, f):
            if line is None:
                yield n, _too_long()
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
                tags = _split_tags(obj.get("tags"))
                extras = {} if obj.get("extras") is None else obj["extras"]
                if not isinstance(extras, dict):
                    raise ValueError("'extras' must be an object")
                extras = extras_of({**extras, **{k: obj[k] for k in KNOWN_EXTRAS if k in obj}})
            except ValueError as err:
                yield n, str(err)
                continue
            yield n, Question(str(qid).strip(), title, body, tags, extras)


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
                tags = _split_tags(elem.get("RELQ_TAGS")) or _split_tags(elem.get("RELQ_CATEGORY"))
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
        rows = csv.reader(_csv_lines(_lines(path, f), first), strict=True)
        try:
            header = next(rows, [])
        except csv.Error as err:
            raise CorpusError(path, 1, f"malformed CSV header ({err})") from None
        except _LongLine:
            raise CorpusError(path, 1, f"the header: {_too_long()}") from None
        if not {"question2_id", "question2"} <= set(header) or rows.line_num != 1:
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
                yield err.line, _too_long()
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
