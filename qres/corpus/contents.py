"""A corpus file as indexing meets it. Its first question is read before anything else, so
a file that holds none — a dump's ``Tags.xml`` given for its ``Posts.xml``, a README read as
id/title/body lines — stops with one line saying what the file holds, before an index is
created or changed; an error that stops the reading later says what the run kept."""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

from qres.corpus.readers import (
    CorpusError,
    Question,
    ReadStats,
    detect_format,
    open_text,
    read_corpus,
)

# The other files of a StackExchange dump, by their root element.
DUMP_FILES = {
    "badges": "Badges.xml",
    "comments": "Comments.xml",
    "posthistory": "PostHistory.xml",
    "postlinks": "PostLinks.xml",
    "tags": "Tags.xml",
    "users": "Users.xml",
    "votes": "Votes.xml",
}
_ROOT = re.compile(r"<([A-Za-z_][\w.-]*)")
# What readers.detect_format falls back on when nothing marks the file as another format.
FALLBACK_FORMATS = ("askubuntu", "semeval-xml")


def read_checked(
    path: Path, fmt: str | None, skip_bad: bool, stats: ReadStats
) -> tuple[Iterator[Question], str]:
    """The questions of ``path`` as :func:`~qres.corpus.readers.read_corpus` reads them (in
    ``fmt``, or the format detected), the first one already read, and the format read."""
    read_as = fmt or detect_format(path)
    questions = read_corpus(path, read_as, skip_bad=skip_bad, stats=stats)
    return first_question_read(questions, path, read_as, fmt is None, stats), read_as


def first_question_read(
    questions: Iterator[Question], path: Path, fmt: str, guessed: bool, stats: ReadStats
) -> Iterator[Question]:
    """``questions`` (read from ``path`` as ``fmt``) with the first one already read. Raises
    :class:`CorpusError` when there is none, saying what the file holds; an error before the
    first question of a format ``guessed`` by falling back on it says so."""
    fallback = guessed and fmt in FALLBACK_FORMATS
    why = ": its first line is no header naming id, title and body" if fmt == "askubuntu" else ""
    said = f" (read as {fmt}, guessed from the file{why}; --format picks another)"
    guess = said if fallback else ""
    try:
        first = next(questions)
    except StopIteration:
        what, certain = holds(path, fmt)
        skipped = f"; {stats.skipped:,} malformed records skipped" if stats.skipped else ""
        guessed_as = "" if certain else guess
        raise CorpusError(
            path, None, f"no questions: {what}{skipped}{guessed_as}; nothing was indexed"
        ) from None
    except CorpusError as err:
        if not guess or err.line is None:  # what the whole file is: no format would read it
            raise
        raise CorpusError(err.path, err.line, f"{err.problem}{guess}") from None
    return itertools.chain([first], questions)


@contextlib.contextmanager
def saying_what_is_kept(stats: ReadStats, discarded: str | None = None):
    """A :class:`CorpusError` raised inside says, on its line, that the questions read before
    it are in the index, or ``discarded`` (what a failed rebuild leaves) instead."""
    try:
        yield
    except CorpusError as err:
        kept = discarded or f"the questions read before it are in the index ({stats.read:,})"
        raise CorpusError(err.path, err.line, f"{err.problem}; {kept}") from None


def holds(path: Path, fmt: str) -> tuple[str, bool]:
    """What a file that gave no question holds, in a few words, and whether that is certain
    (a dump's file knows by its root element) rather than what ``fmt`` made of it."""
    if not Path(path).is_file():  # a pipe, read to its end: nothing to look at again
        return f"no {fmt} records", False
    with open_text(path) as f:
        head = f.read(4096)
    if not head.strip():
        return "the file is empty", True
    if fmt in ("stackexchange", "semeval-xml"):
        roots = _ROOT.findall(re.sub(r"<[?!][^>]*>", "", head))
        root = roots[0] if roots else None
        if root is None:
            return "no XML element", False
        if root.lower() in DUMP_FILES:
            name = DUMP_FILES[root.lower()]
            return f"a StackExchange dump's {name} (<{root}>), not its Posts.xml", True
        if root == "posts":
            return 'a StackExchange Posts.xml without a question row (PostTypeId="1")', True
        return f"XML whose root is <{root}>, without a SemEval <RelQuestion>", False
    if fmt == "tsv":
        return "a header line and no question rows", False
    return f"no {fmt} records", False
