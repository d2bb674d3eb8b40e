"""Which questions a forum closed as duplicates, and of which: a dump's ``PostLinks.xml``.

A StackExchange moderator closes a question as a duplicate of one that already has the
answers; the dump's ``PostLinks.xml`` holds that as a row with ``LinkTypeId="3"``
(``PostId`` the duplicate, ``RelatedPostId`` the original, ``CreationDate``). qres keeps it
with the duplicate, in two extras: ``duplicate_of``, the originals' ids, and
``duplicate_dates``, each link's ``CreationDate``, in the same order (oldest link first,
space-separated), so that search can show the original in the duplicate's place
(:mod:`qres.ranking.duplicates`). A TSV or JSONL corpus may carry the same two fields itself.

``qres index Posts.xml`` reads the ``PostLinks.xml`` (or ``.xml.gz``) beside it. The links
are read whole before the posts (a dict of one entry per duplicate: StackOverflow's million
duplicates take a few hundred MB), then each question is streamed with its own.
"""

from __future__ import annotations

import gzip
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from qres.corpus.readers import CorpusError, Question
from qres.corpus.stackexchange import DUPLICATE_DATES, DUPLICATE_OF

LINK_FILE = "PostLinks.xml"
DUPLICATE = "3"  # LinkTypeId of "closed as a duplicate of" (1 is "linked")
# Index metadata set once a question naming its originals is written: search follows links
# only in such an index, so an index without any pays nothing for them.
INDEX_FLAG = "closed_duplicates"

# A duplicate's originals, oldest link first: [(original id, link CreationDate), ...].
Links = Mapping[str, list[tuple[str, str]]]


def beside(corpus: str | Path) -> Path | None:
    """The ``PostLinks.xml`` (or ``.xml.gz``) in the folder of ``corpus``, if there is one."""
    folder = Path(corpus).parent
    found = [folder / name for name in (LINK_FILE, LINK_FILE + ".gz")]
    return next((path for path in found if path.is_file()), None)


def read_links(path: Path) -> Iterator[tuple[str, str, str]]:
    """(PostId, RelatedPostId, CreationDate) of each duplicate link, streamed."""
    try:
        with gzip.open(path) if path.suffix == ".gz" else open(path, "rb") as f:
            for _, row in ET.iterparse(f):
                if row.tag == "row" and row.get("LinkTypeId") == DUPLICATE:
                    post, related = row.get("PostId"), row.get("RelatedPostId")
                    if post and related:
                        yield post.strip(), related.strip(), (row.get("CreationDate") or "")
                row.clear()
    except ET.ParseError as err:
        raise CorpusError(path, err.position[0], f"malformed XML ({err})") from None
    except (OSError, EOFError) as err:
        raise CorpusError(path, None, f"cannot read the file ({err})") from None


def read(path: str | Path) -> dict[str, list[tuple[str, str]]]:
    """Every duplicate of the file's links with its originals, oldest link first."""
    links: dict[str, list[tuple[str, str]]] = {}
    for post, original, date in read_links(Path(path)):
        if original != post and all(o != original for o, _ in links.get(post, ())):
            links.setdefault(post, []).append((original, date))
    for originals in links.values():
        originals.sort(key=lambda link: link[1])
    return links


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
