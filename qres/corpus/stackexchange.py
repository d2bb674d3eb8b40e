"""The StackExchange data dump's ``Posts.xml``: its questions, one ``<row>`` element each.

Only questions (``PostTypeId="1"``) are kept; answers, wiki posts and the rest are passed
over. A question's ``Body`` is HTML: :func:`html_to_text` turns it into plain text (code
blocks kept as text, entities decoded). ``Tags`` comes in either style the dumps have used,
``<travel><visas>`` or ``|travel|visas|``. What a forum shows beside a question but qres
does not rank on — ``Score``, ``AnswerCount``, ``AcceptedAnswerId``, ``ClosedDate`` — is
kept in ``extras`` (integers as ``int``, the date as the dump's text) where the row has it.

The file is parsed incrementally, a line at a time (the dump writes one row a line, and
StackOverflow's is ~100 GB), each row dropped once read, so memory stays constant. This
module knows nothing of files or errors' wording: :mod:`qres.corpus.readers` opens the file
and turns the problems yielded here into its one-line errors.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from html import unescape
from html.parser import HTMLParser

QUESTION = "1"
# Attribute → (extras key, kind) of what is stored, not ranked on.
EXTRAS = {
    "Score": ("score", int),
    "AnswerCount": ("answer_count", int),
    "AcceptedAnswerId": ("accepted_answer_id", str),
    "ClosedDate": ("closed_date", str),
}
# What qres.corpus.duplicate_links adds from PostLinks.xml to a question closed as a duplicate.
DUPLICATE_OF, DUPLICATE_DATES = "duplicate_of", "duplicate_dates"
_BLOCKS = {
    "p", "div", "pre", "br", "li", "ul", "ol", "blockquote", "hr", "table", "tr",
    "h1", "h2", "h3", "h4", "h5", "h6",
}  # fmt: skip
_ANGLE_TAGS = re.compile(r"<([^<>]*)>")
# expat (before 2.6, which Python 3.11 ships) parses an unfinished token again from its start
# on every feed: one 20 MB attribute fed 64 KB at a time is scanned ~300 times over. While a
# feed gives no event, the next one gathers as much text as all since the last event, which
# keeps parsing linear; a token still unfinished after this many characters is refused (one
# 4 GB attribute in a 4 MB .gz must not take gigabytes and minutes).
MAX_TOKEN_CHARS = 64 * 2**20
# A body's HTML beyond this is not turned into text (its text is cut at 20,000 characters
# anyway, and html_to_text takes ~0.1 s a MB).
MAX_BODY_HTML_CHARS = 1_000_000
# runs of spaces, tabs, ... other than a single space (the only ones to replace by one space)
_SPACES = re.compile(r"[\t\r\f\v][ \t\r\f\v]*| [ \t\r\f\v]+")
_BLANK_LINES = re.compile(r"\n\s*\n+")


class MalformedXML(ValueError):
    """The XML cannot be parsed on from ``line``: nothing after it can be read."""

    def __init__(self, line: int, problem: str):
        super().__init__(problem)
        self.line = line


class _TextOnly(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)  # entities decoded, in text and attributes
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data):
        self.parts.append(data)


# A well-formed tag of the kind post bodies are made of: a name, attributes with quoted values,
# maybe a closing slash. Bodies made only of these and text are read by a regular expression,
# ~3x faster than HTMLParser (pure Python: the largest part of reading a dump) and giving
# what it gives (tests/test_stackexchange.py compares the two on every real body at hand); a
# body with anything else (a bare "<", a comment, <script>) goes through HTMLParser.
_SIMPLE_TAG = re.compile(
    r"<(/?)([a-zA-Z][a-zA-Z0-9]*)"
    r"((?:[ \t\n\r\f]+[a-zA-Z_:][-a-zA-Z0-9_:.]*"
    r"(?:[ \t\n\r\f]*=[ \t\n\r\f]*(?:\"[^\"<>]*\"|'[^'<>]*'))?)*)[ \t\n\r\f]*(/?)>"
)
# Elements whose content HTMLParser reads as raw text (some only in newer Pythons).
_RAW_TEXT = {"script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes",
             "noscript", "plaintext"}  # fmt: skip


def _parser_parts(html: str) -> list[str]:
    """What :class:`_TextOnly` collects from ``html``: its text and a line break a block."""
    parser = _TextOnly()
    parser.feed(html)
    parser.close()
    return parser.parts


def _simple_parts(html: str) -> list[str] | None:
    """What :func:`_parser_parts` gives for ``html``, if it is made of simple tags and text
    only (None: it is not)."""
    parts: list[str] = []
    at = 0
    for tag in _SIMPLE_TAG.finditer(html):
        text = html[at : tag.start()]
        if "<" in text:
            return None
        if text:
            parts.append(unescape(text))
        closing, name, attributes, slash = tag.groups()
        name = name.lower()
        if name in _RAW_TEXT or (closing and (attributes or slash)):
            return None
        if name in _BLOCKS:
            parts.append("\n\n" if slash else "\n")  # <br/>: HTMLParser opens and closes it
        at = tag.end()
    text = html[at:]
    if "<" in text:
        return None
    if text:
        parts.append(unescape(text))
    return parts


def html_to_text(html: str) -> str:
    """A post body's text: tags dropped (block elements become line breaks, so words of two
    paragraphs never run together), the text of code blocks kept, entities decoded, runs of
    spaces and of blank lines collapsed."""
    parts = _simple_parts(html)
    if parts is None:
        parts = _parser_parts(html)
    text = _SPACES.sub(" ", "".join(parts))
    text = "\n".join(line.strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", text).strip()


# A body a forum stored as HTML opens with a block element, as every StackExchange post does
# (after any comments).
_OPENS_AS_HTML = re.compile(
    r"\s*(?:<!--(?:(?!-->).)*-->\s*)*"  # each comment ends at its first -->
    r"<(?:p|div|pre|blockquote|ol|ul|table|hr|h[1-6])[\s/>]",
    re.I | re.S,
)


def body_text(body: str) -> str:
    """A body from a forum's own export (TSV, CSV, JSONL, the service's writes) as text: one
    stored as HTML (it opens with a block element and closes a tag) through
    :func:`html_to_text`, any other as it is ("<p> adds a margin" stays as written)."""
    if _OPENS_AS_HTML.match(body) and "</" in body:
        return html_to_text(body)
    return body


def split_tags(value: str | None) -> tuple[str, ...]:
    """``<a><b>`` (older dumps) or ``|a|b|`` (newer ones) → ``("a", "b")``."""
    if not value:
        return ()
    value = value.strip()
    if value.startswith("<"):
        return tuple(t.strip() for t in _ANGLE_TAGS.findall(value) if t.strip())
    return tuple(t.strip() for t in value.split("|") if t.strip())


def looks_like_posts(head: str) -> bool:
    """Whether the first lines of an XML file are a dump's ``<posts>``."""
    return re.search(r"<posts[\s>]", head) is not None


def xml_events(
    parser: ET.XMLPullParser, lines: Iterable[tuple[int, str]]
) -> Iterator[tuple[int, str, ET.Element]]:
    """``(line, event, element)`` for each event of ``parser`` fed ``lines`` (``(line
    number, text)`` pieces), ``line`` being the last line fed (the caller closes the
    parser). Raises :class:`MalformedXML` when the text since the last event runs past
    :data:`MAX_TOKEN_CHARS` characters (see there)."""
    pending: list[str] = []
    size = since = 0  # characters gathered; fed since the last event
    quiet_from = n = 1  # where the text fed since the last event began; the last line

    def feed():
        nonlocal pending, size, since, quiet_from
        parser.feed("".join(pending))
        quiet_from = quiet_from if since else n
        pending, since, size = [], since + size, 0
        for event, elem in parser.read_events():
            yield n, event, elem
            since = 0
        if since > MAX_TOKEN_CHARS:
            raise MalformedXML(
                quiet_from,
                f"an element or attribute runs past {MAX_TOKEN_CHARS:,} characters (a forum "
                "post is a few KB): not read",
            )

    for n, text in lines:  # noqa: B007 - feed() reads n
        pending.append(text)
        size += len(text)
        # no event for a while: gather as much again before feeding (never past the limit)
        if size < since and since + size <= MAX_TOKEN_CHARS:
            continue
        yield from feed()
    if pending:
        yield from feed()


def read_posts(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, dict | str]]:
    """``(line, question)`` for each question row of ``lines`` (``(line number, text)``
    pairs), a question being a dict of ``id``, ``title``, ``body``, ``tags``, ``extras``;
    ``(line, problem)`` for a question row that cannot be read. Raises :class:`MalformedXML`
    where the XML itself breaks, after every row before it."""
    parser = ET.XMLPullParser(events=("start", "end"))
    root, row_line, n, ended = None, 1, 1, False
    try:
        for n, event, elem in xml_events(parser, lines):
            if event == "start":
                if root is None:
                    root = elem
                elif elem.tag == "row":
                    row_line = n
                continue
            if elem.tag != "row":
                continue
            if elem.get("PostTypeId") == QUESTION:
                yield row_line, _question(elem)
            if root is not None and elem in root:  # (a row nested deeper is left)
                root.remove(elem)  # the rows read are dropped: memory stays constant
        ended = True  # every line was fed: the XML is left open at the end of the file
        parser.close()
    except ET.ParseError as err:
        cut = ""
        if ended and root is not None:
            cut = f": the file ends before </{root.tag}>, so it looks cut short"
        raise MalformedXML(err.position[0] or n, f"malformed XML ({err}){cut}") from None
    if root is None:
        raise MalformedXML(n, "no XML element: not a Posts.xml file")
    if root.tag != "posts":
        raise MalformedXML(1, f"expected a StackExchange Posts.xml (<posts>), found <{root.tag}>")


def _question(row: ET.Element) -> dict | str:
    qid = (row.get("Id") or "").strip()
    if not qid:
        return "a question row without an Id"
    extras = {}
    for attribute, (key, kind) in EXTRAS.items():
        value = row.get(attribute)
        if value is None or not value.strip():
            continue
        if kind is int:
            try:
                value = int(value)
            except ValueError:
                return f"question {qid}: {attribute}={value!r} is not a whole number"
        extras[key] = value
    return {
        "id": qid,
        "title": row.get("Title") or "",
        "body": html_to_text((row.get("Body") or "")[:MAX_BODY_HTML_CHARS]),
        "tags": split_tags(row.get("Tags")),
        "extras": extras,
    }
