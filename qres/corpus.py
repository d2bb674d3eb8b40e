"""Streaming readers for forum question corpora (what ``qres index`` takes).

Formats, chosen by ``fmt`` or detected from the file name and first line:

* ``askubuntu`` — ``id<TAB>title<TAB>body``, no header (``text_tokenized.txt.gz``);
* ``tsv`` — a header row naming ``id``, ``title``, ``body`` and optionally ``tags``
  (comma-separated);
* ``jsonl`` — one object a line with ``id``, ``title``, ``body`` and optional ``tags``
  (a list or a comma-separated string);
* ``semeval-xml`` — SemEval-2016/2017 Task 3 XML: every related question (``RelQuestion``);
* ``semeval-csv`` — the SemEval-2016 subtask B train-part-1 CSV: every ``question2``.

Any of them may be gzipped (``.gz``). Files are read line by line (XML incrementally), never
whole. A malformed record raises :class:`CorpusError` naming file, line and problem unless
``skip_bad`` is set, in which case it is counted in :class:`ReadStats` and skipped.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# A forum question is a few KB at most; anything longer is cut so one pathological line
# cannot blow up memory or the index.
MAX_FIELD_CHARS = 20_000
csv.field_size_limit(2**31 - 1)  # long fields are cut by _clean, not refused by the csv module

FORMATS = ("askubuntu", "tsv", "jsonl", "semeval-xml", "semeval-csv")


@dataclass(frozen=True)
class Question:
    id: str
    title: str
    body: str
    tags: tuple[str, ...] = ()

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


def open_text(path: str | Path) -> io.TextIOBase:
    """Open a plain or gzipped text file; undecodable bytes become U+FFFD, never an error."""
    path = Path(path)
    if not path.exists():
        raise CorpusError(path, None, "file not found")
    raw = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # noqa: SIM115
    # utf-8-sig drops the byte-order mark spreadsheet tools write; lines end at \n only, so
    # a stray \r inside a field neither splits a record nor shifts reported line numbers.
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="\n")


def detect_format(path: str | Path) -> str:
    name = Path(path).name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith(".xml"):
        return "semeval-xml"
    if name.endswith(".csv"):
        return "semeval-csv"
    with open_text(path) as f:
        first = f.readline().rstrip("\r\n").lower().split("\t")
    return "tsv" if first[:1] == ["id"] else "askubuntu"


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


def _clean(q: Question, stats: ReadStats) -> Question:
    if not q.id:
        raise ValueError("empty id")
    title, body = q.title.strip(), q.body.strip()
    if not title and not body:
        stats.empty += 1
        raise ValueError(f"question {q.id!r} has an empty title and body")
    if len(title) > MAX_FIELD_CHARS or len(body) > MAX_FIELD_CHARS:
        stats.truncated += 1
        title, body = title[:MAX_FIELD_CHARS], body[:MAX_FIELD_CHARS]
    return Question(q.id, title, body, q.tags)


def _split_tags(value) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list):
        raise ValueError(f"tags must be a list or a comma-separated string, got {value!r}")
    return tuple(str(t).strip() for t in value if str(t).strip())


def _read_askubuntu(path: Path):
    with open_text(path) as f:
        for n, line in enumerate(f, 1):
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
        header = f.readline().rstrip("\r\n").split("\t")
        columns = [h.strip().lower() for h in header]
        missing = {"id", "title", "body"} - set(columns)
        if missing:
            yield 1, f"header lacks column(s) {', '.join(sorted(missing))}"
            return
        where = {
            name: columns.index(name) for name in ("id", "title", "body", "tags") if name in columns
        }
        for n, line in enumerate(f, 2):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != len(columns):
                yield n, f"expected {len(columns)} tab-separated fields, found {len(parts)}"
                continue
            tags = _split_tags(parts[where["tags"]]) if "tags" in where else ()
            yield (
                n,
                Question(
                    parts[where["id"]].strip(), parts[where["title"]], parts[where["body"]], tags
                ),
            )


def _read_jsonl(path: Path):
    with open_text(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                yield n, f"invalid JSON ({err.msg} at column {err.colno})"
                continue
            if not isinstance(obj, dict):
                yield n, "expected a JSON object"
                continue
            if obj.get("id") is None:
                yield n, "missing key 'id'" if "id" not in obj else "'id' is null"
                continue
            title, body = obj.get("title") or "", obj.get("body") or ""
            if not isinstance(title, str) or not isinstance(body, str):
                yield n, "'title' and 'body' must be strings"
                continue
            try:
                tags = _split_tags(obj.get("tags"))
            except ValueError as err:
                yield n, str(err)
                continue
            yield n, Question(str(obj["id"]).strip(), title, body, tags)


def _read_semeval_xml(path: Path):
    """Every RelQuestion of a SemEval Task 3 file, once each (they repeat across originals)."""
    seen: set[str] = set()
    with open_text(path) as f:
        try:
            for _, elem in ET.iterparse(f, events=("end",)):
                if elem.tag == "OrgQuestion":
                    elem.clear()  # its threads and comments are done with
                if elem.tag != "RelQuestion":
                    continue
                qid = elem.get("RELQ_ID", "")
                if qid not in seen:
                    seen.add(qid)
                    tags = _split_tags(elem.get("RELQ_TAGS")) or _split_tags(
                        elem.get("RELQ_CATEGORY")
                    )
                    yield (
                        None,
                        Question(
                            qid,
                            elem.findtext("RelQSubject") or "",
                            elem.findtext("RelQBody") or "",
                            tags,
                        ),
                    )
                elem.clear()
        except ET.ParseError as err:
            yield err.position[0], f"malformed XML ({err})"


def _read_semeval_csv(path: Path):
    """question2 of the subtask B train-part-1 CSV.

    The file joins subject and body with ". "; they are split back at the first one.
    """
    with open_text(path) as f:
        rows = csv.DictReader(f)
        if not rows.fieldnames or not {"question2_id", "question2"} <= set(rows.fieldnames):
            yield 1, "expected the SemEval subtask B CSV header (question2_id, question2, ...)"
            return
        seen: set[str] = set()
        for row in rows:
            qid = row["question2_id"]
            if not qid:
                yield rows.line_num, "empty question2_id"
            elif qid not in seen:
                seen.add(qid)
                title, _, body = (row["question2"] or "").partition(". ")
                yield rows.line_num, Question(qid.strip(), title, body)
