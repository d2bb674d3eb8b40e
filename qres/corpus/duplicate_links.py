"""Which questions a forum closed as duplicates, and of which: a dump's ``PostLinks.xml``.

A StackExchange moderator closes a question as a duplicate of one that already has the
answers; the dump's ``PostLinks.xml`` holds that as a row with ``LinkTypeId="3"``
(``PostId`` the duplicate, ``RelatedPostId`` the original, ``CreationDate``). qres keeps it
with the duplicate, in two extras: ``duplicate_of``, the originals' ids, and
``duplicate_dates``, each link's ``CreationDate``, in the same order (oldest link first,
space-separated), so that search can show the original in the duplicate's place
(:mod:`qres.ranking.duplicates`). A TSV or JSONL corpus may carry the same two fields itself.

``qres index Posts.xml`` reads the ``PostLinks.xml`` (or ``.xml.gz``) beside it. The links
are read whole before the posts (held as :class:`DuplicateLinks`, about 40 bytes a
duplicate link; the file's other links and rows are dropped as they are read), then each
question is streamed with its own.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Literal

import numpy as np

from qres.corpus.files import STDIN, xml_pieces
from qres.corpus.readers import CorpusError, Question, id_problem
from qres.corpus.stackexchange import DUPLICATE_DATES, DUPLICATE_OF, MalformedXML, xml_events

LINK_FILE = "PostLinks.xml"
DUPLICATE = "3"  # LinkTypeId of "closed as a duplicate of" (1 is "linked")
# Index metadata set once a question naming its originals is written: search follows links
# only in such an index, so an index without any pays nothing for them.
INDEX_FLAG = "closed_duplicates"

# A duplicate's originals, oldest link first: [(original id, link CreationDate), ...].
Links = Mapping[str, list[tuple[str, str]]]
_DATE_BYTES = 24  # a dump's CreationDate is 23 characters
_DATE = re.compile(r"\d{4}-\d\d-\d\d([T ]\d\d:\d\d(:\d\d(\.\d+)?)?)?$")


def beside(corpus: str | Path) -> Path | None:
    """The ``PostLinks.xml`` (or ``.xml.gz``) in the folder of ``corpus``, if there is one."""
    if str(corpus) == STDIN:  # standard input is in no folder
        return None
    folder = Path(corpus).parent
    found = [folder / name for name in (LINK_FILE, LINK_FILE + ".gz")]
    return next((path for path in found if path.is_file()), None)


def chosen(corpus: str | Path, fmt: str, links: str | Path | Literal[False] | None) -> Path | None:
    """The duplicate links ``corpus`` (read as ``fmt``) is indexed with: ``links`` (a file;
    False: none), by default a StackExchange dump's own, beside its ``Posts.xml``."""
    if links is False:
        return None
    if links:
        return Path(links)
    return beside(corpus) if fmt == "stackexchange" else None


def read_links(path: Path, dated: bool = False) -> Iterator[tuple[str, str, str]]:
    """(PostId, RelatedPostId, CreationDate) of each duplicate link, streamed; read as the
    posts are (:func:`qres.corpus.readers.xml_pieces`): a corrupt gzip stream or one endless
    attribute is one :class:`CorpusError`; so is a duplicate link without its two ids (or
    with one no question can have), and, where ``dated``, a link without a date."""
    parser = ET.XMLPullParser(events=("start", "end"))
    root = None
    try:
        for line, event, row in xml_events(parser, xml_pieces(path)):
            if event == "start":
                root = row if root is None else root
                continue
            if row.tag != "row":
                continue
            if row.get("LinkTypeId") == DUPLICATE:
                post, related = row.get("PostId"), row.get("RelatedPostId")
                for name, value in (("PostId", post), ("RelatedPostId", related)):
                    problem = "missing" if value is None else id_problem(value.strip())
                    if problem:
                        raise CorpusError(path, line, f"a duplicate link's {name}: {problem}")
                date = row.get("CreationDate") or ""
                if dated and not _DATE.match(date):
                    raise CorpusError(
                        path,
                        line,
                        f"a duplicate link's CreationDate is {date!r}, not a date "
                        "(YYYY-MM-DDTHH:MM:SS): links are split and replayed by it",
                    )
                yield post.strip(), related.strip(), date
            if row in root:
                root.remove(row)  # the rows read are dropped: memory stays constant
        parser.close()
    except ET.ParseError as err:
        raise CorpusError(path, err.position[0], f"malformed XML ({err})") from None
    except MalformedXML as err:
        raise CorpusError(path, err.line, str(err)) from None


def read(path: str | Path, hint: str = "", dated: bool = False) -> DuplicateLinks:
    """Every duplicate of the file's links with its originals, oldest link first; ``hint``
    ends the message of a file that cannot be read (what to do instead); ``dated``: every
    link must have its date (what evaluation splits and replays them by)."""
    try:
        return DuplicateLinks(read_links(Path(path), dated))
    except CorpusError as err:
        if not hint:
            raise
        raise CorpusError(err.path, err.line, f"{err.problem} ({hint})") from None


class DuplicateLinks(Mapping):
    """Each duplicate's originals with the links' dates, oldest link first (a link listed
    twice kept once, a link to itself dropped), as :data:`Links` reads them.

    Held in three arrays sorted by duplicate, about 40 bytes a link (StackOverflow's million
    or so duplicate links take ~45 MB, where a dict of lists of tuples takes ~10 times as
    much); ids that are not whole numbers and over-long dates (no dump has them) are kept in
    a plain dict beside."""

    def __init__(self, links: Iterable[tuple[str, str, str]]):
        posts, originals, dates = array("q"), array("q"), bytearray()
        others: dict[str, list[tuple[str, str]]] = {}
        for post, original, date in links:
            if original == post:
                continue
            encoded = date.encode()
            if _number(post) and _number(original) and len(encoded) <= _DATE_BYTES:
                posts.append(int(post))
                originals.append(int(original))
                dates += encoded.ljust(_DATE_BYTES, b"\0")
            elif all(o != original for o, _ in others.get(post, ())):
                others.setdefault(post, []).append((original, date))
        post_of = np.frombuffer(posts, np.int64) if posts else np.zeros(0, np.int64)
        original_of = np.frombuffer(originals, np.int64) if originals else np.zeros(0, np.int64)
        date_of = np.frombuffer(dates, f"S{_DATE_BYTES}") if dates else np.zeros(0, "S1")
        at = np.arange(len(post_of))  # file order: links of the same date keep it
        # a link listed again (the same duplicate and original) is kept once, its oldest
        order = np.lexsort((at, date_of, original_of, post_of))
        post_of, original_of, date_of, at = (a[order] for a in (post_of, original_of, date_of, at))
        first = np.ones(len(post_of), bool)
        first[1:] = (post_of[1:] != post_of[:-1]) | (original_of[1:] != original_of[:-1])
        post_of, original_of, date_of, at = (a[first] for a in (post_of, original_of, date_of, at))
        order = np.lexsort((at, date_of, post_of))  # by duplicate, oldest first, then as listed
        # arrays rather than numpy's: a lookup (bisect) reads Python ints from them ~5x faster
        self._posts = array("q", post_of[order].tobytes())
        self._originals = array("q", original_of[order].tobytes())
        self._dates = date_of[order]
        for mine in others.values():
            mine.sort(key=lambda link: link[1])
        self._others = others
        self._count = len(np.unique(np.frombuffer(self._posts, np.int64))) + sum(
            1 for post in others if not self._in_arrays(post)
        )

    def _span(self, post: str) -> tuple[int, int]:
        if not _number(post):
            return 0, 0
        key = int(post)
        start = bisect_left(self._posts, key)
        if start == len(self._posts) or self._posts[start] != key:
            return start, start
        return start, bisect_right(self._posts, key, start)

    def _in_arrays(self, post: str) -> bool:
        start, end = self._span(post)
        return end > start

    def __getitem__(self, post: str) -> list[tuple[str, str]]:
        start, end = self._span(post)
        mine = [
            (str(self._originals[i]), self._dates[i].decode()) for i in range(start, end)
        ] + self._others.get(post, [])
        if not mine:
            raise KeyError(post)
        if start < end and post in self._others:
            mine.sort(key=lambda link: link[1])
        return mine

    def get(self, post: str, default=None):
        # Mapping.get raises and catches a KeyError for each question never closed: most
        return self[post] if post in self else default  # noqa: SIM401 - this is get

    def __contains__(self, post) -> bool:
        return isinstance(post, str) and (self._in_arrays(post) or post in self._others)

    def __iter__(self) -> Iterator[str]:
        for post in np.unique(np.frombuffer(self._posts, np.int64)):
            yield str(post)
        yield from (post for post in self._others if not self._in_arrays(post))

    def __len__(self) -> int:
        return self._count


def _number(text: str) -> bool:
    """Whether ``text`` is a whole number written as Python writes it (no leading zero)."""
    return text.isdigit() and text.isascii() and (text[0] != "0" or text == "0")


def closes_none(path: Path | None, known: int, closed: int) -> str | None:
    """A warning where the links of ``path`` (``known`` duplicates) close none of the
    questions read (``closed``): then they change nothing search does."""
    if path is None or closed:
        return None
    if not known:
        return f'warning: {path} holds no duplicate links (LinkTypeId="3"): it closes nothing'
    return (
        f"warning: {path} closes none of the indexed questions: is it this forum's PostLinks.xml?"
    )


def names_originals(questions: Iterable[Question]) -> bool:
    """Whether any of ``questions`` was closed as a duplicate (names its originals)."""
    return any(DUPLICATE_OF in q.extras for q in questions)


def attach(questions: Iterable[Question], links: Links) -> Iterator[Question]:
    """``questions``, each one closed as a duplicate with its links in its extras."""
    for q in questions:
        mine = links.get(q.id)
        if mine:
            extras = {
                **q.extras,
                DUPLICATE_OF: " ".join(o for o, _ in mine),
                DUPLICATE_DATES: " ".join(d or "-" for _, d in mine),  # "-": undated
            }
            q = replace(q, extras=extras)
        yield q


def counting(questions: Iterable[Question], closed: Mapping, seen: list[int]) -> Iterator[Question]:
    """``questions``, counting in ``seen[0]`` those ``closed`` closes as duplicates."""
    for q in questions:
        seen[0] += q.id in closed
        yield q
