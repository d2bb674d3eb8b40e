"""A corpus file's text as the readers of :mod:`qres.corpus.readers` get it: plain or gzipped;
a pipe (``-``: standard input) read once, the first bytes format detection read replayed to
the reader; lines never held whole beyond :data:`MAX_LINE_CHARS` characters; and
:class:`CorpusError`, the one line ``file:line: problem`` every reader raises."""

from __future__ import annotations

import gzip
import io
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

# A line longer than this is refused as a bad record without ever being held whole (one
# 4 GB line of a small .gz must not take 4 GB): far above any question's id, title and body.
MAX_LINE_CHARS = 1_000_000
HEAD_BYTES = 1 << 16  # what format detection reads at most
# The formats qres.corpus.readers reads (named here for the zip archive's refusal).
FORMATS = ("askubuntu", "tsv", "csv", "jsonl", "semeval-xml", "semeval-csv", "stackexchange")
STDIN = "-"  # the corpus path that reads standard input
_ZIP = ("PK\x03\x04", "PK\x05\x06")  # how a zip archive (or an empty one) begins
_READS = f"{', '.join(FORMATS)}; plain or .gz"


class CorpusError(ValueError):
    """A malformed input record; the message is ``file:line: problem``."""

    def __init__(self, path: str | Path, line: int | None, problem: str):
        name = "standard input" if str(path) == STDIN else str(path)
        where = f"{name}:{line}" if line is not None else name
        super().__init__(f"{where}: {problem}")
        self.path, self.line, self.problem = str(path), line, problem


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


def head_text(path: Path, enough: int, first_line: bool) -> str:
    """The file's first ``enough`` bytes as text (or as far as its first line that is not
    blank, if ``first_line``; at most :data:`HEAD_BYTES`), for format detection. A pipe is
    read once: what is read here is kept for the next :func:`open_text` of the same path to
    read again."""
    raw = _open_bytes(path)
    head = b""
    try:
        while len(head) < min(enough, HEAD_BYTES) and not (first_line and _has_a_line(head)):
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


def _has_a_line(head: bytes) -> bool:
    """Whether ``head`` holds a whole line that is not blank."""
    return any(line.strip() for line in head.split(b"\n")[:-1])


def first_line(path: Path) -> str:
    """The file's first line that is not blank (the readers skip blank lines before a header
    too), for format detection."""
    text = head_text(path, HEAD_BYTES, first_line=True)
    return next((line for line in text.split("\n") if line.strip()), "")


def numbered_lines(
    path: str | Path, f: io.TextIOBase, size: int = -1
) -> Iterator[tuple[int, str | None]]:
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
        yield from numbered_lines(path, f, size=1 << 16)


def too_long() -> str:
    return f"the line is longer than {MAX_LINE_CHARS:,} characters: not a forum question"


def _unreadable(err: Exception) -> str:
    if isinstance(err, EOFError):
        return "the gzip file is truncated: it ends before its end-of-stream marker"
    if isinstance(err, gzip.BadGzipFile):
        return f"not a valid gzip file ({err})"
    if isinstance(err, zlib.error):
        return f"corrupt gzip data ({err})"
    return f"cannot read the file ({getattr(err, 'strerror', None) or err})"
