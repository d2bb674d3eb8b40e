"""How many questions a corpus file holds, counted in a fast pass over its bytes: the total
that lets ``qres index`` show how far it is and how long is left.

The count is an estimate, never used for anything but the display: a TSV or JSON Lines file
is counted by its lines (less a TSV's header), a StackExchange dump by its rows marked
``PostTypeId="1"``, with no parsing; lines the reader skips are counted. Other formats
(small benchmark files) and pipes (standard input, ``/dev/stdin``), which only the reader
may read, are not counted. Counting reads the file once more, in a thread beside the
indexing: about a second per gigabyte from the page cache.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from pathlib import Path

from qres.corpus.files import STDIN

CHUNK = 1 << 23  # bytes read at a time
_QUESTION_ROW = b'PostTypeId="1"'


def count_questions(path: str | Path, fmt: str, chunk: int = CHUNK) -> int | None:
    """About how many questions the ``fmt`` file at ``path`` holds (None: not counted, or
    unreadable; the reader reports that)."""
    path = Path(path)
    # A pipe (standard input, /dev/stdin, <(...)) can be read once only: by the reader.
    if str(path) == STDIN or not path.is_file() or fmt not in ("tsv", "jsonl", "stackexchange"):
        return None
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            if fmt == "stackexchange":
                return _occurrences(f, _QUESTION_ROW, chunk)
            lines = _lines(f, chunk)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    return max(lines - 1, 0) if fmt == "tsv" else lines


def count_beside(path: str | Path, fmt: str, on_count: Callable[[int], None]) -> None:
    """Count the file's questions in a thread of its own and hand the count to
    ``on_count``, unless it is not counted; the caller does not wait."""

    def count() -> None:
        n = count_questions(path, fmt)
        if n is not None:
            on_count(n)

    threading.Thread(target=count, name="qres-count", daemon=True).start()


def _lines(f, chunk: int) -> int:
    lines, last = 0, b"\n"
    while block := f.read(chunk):
        lines += block.count(b"\n")
        last = block[-1:]
    return lines + (last != b"\n")  # a last line without its line end


def _occurrences(f, pattern: bytes, chunk: int) -> int:
    found, tail = 0, b""
    while block := f.read(chunk):
        block = tail + block
        found += block.count(pattern)
        # a match cut by the chunk's end is found in the next one; the kept tail is
        # shorter than the pattern, so none is counted twice
        tail = block[-(len(pattern) - 1) :]
    return found
