"""While a title is being typed, its last word is often unfinished ("boot ubuntu from us").

BM25 matches nothing with "us"-as-typed and an encoder reads it as another word, so a search
of typed text (``qres search --typing``, the widget's ``/search?typing=true``) first
completes the last word: to the word starting with it that is most frequent in the titles of
the text's :data:`CONTEXT` best BM25 matches (ties: the one met first, best match first).
Those titles are the forum's own words in the text's own topic, so "schengen vi" becomes
"schengen visa" where a dictionary would not know. A last word that nothing extends, or text
that ends in a space or punctuation (the word is finished), is searched as typed.

Chosen on the travel forum's train split (864 duplicates, each title cut to its first 12, 20
and 30 characters, MiniLM exact cosine, nDCG@10 on the text alone): as typed 5.29 / 12.81 /
20.92; completed from the 50 best matches' titles 7.98 / 16.17 / 24.06; from the most
frequent word of the whole forum 7.10 / 15.06 / 22.75; leaving the unfinished word out
5.27 / 12.70 / 20.87; the whole words the author went on to type (the most there is to
gain) 9.50 / 17.87 / 24.74.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from qres.backends.base import Backend, Candidates
from qres.text import normalize, tokenize

CONTEXT = 50  # the best BM25 matches whose titles complete the last word
# A word as qres.text tokenises one (inner - ' . kept), at the very end of the text.
_LAST_WORD = re.compile(r"\w+(?:['’.\-]\w+)*$")


def last_word(text: str) -> str | None:
    """The word ``text`` ends with, normalised as the encoders' tokens are (``wi-f``, not
    ``f``), or None where it ends in a space or punctuation."""
    found = _LAST_WORD.search(text)
    return normalize(found.group()) if found else None


def complete(text: str, titles: Iterable[str]) -> str:
    """``text`` with its last word replaced by the word of ``titles`` (best match first)
    that starts with it and is most frequent there; ``text`` itself where none does."""
    word = last_word(text)
    if word is None:
        return text
    counts = Counter(t for title in titles for t in tokenize(title) if t.startswith(word))
    if not counts:
        return text
    best = counts.most_common(1)[0][0]  # Counter keeps first-met order among equal counts
    return _LAST_WORD.sub(lambda _: best, text)


def completed(
    backend: Backend, text: str, window: int, exact: bool = True
) -> tuple[str, Candidates | None]:
    """``text`` completed from the titles of its best matches in ``backend``, and, where that
    left it as typed, the BM25 top it read them from (:data:`CONTEXT` or ``window``, the
    more): what a search would otherwise search again. ``exact``: only where that is the top
    ``window`` itself (hybrid rescores all of it; BM25 reads its first ``window``)."""
    if last_word(text) is None:
        return text, None
    found = backend.candidates(text, max(window, CONTEXT))
    ids = found.ids(range(min(CONTEXT, len(found))))
    stored = found.stored(ids, backend.fetch)
    text_searched = complete(text, [stored[i].title for i in ids if i in stored])
    deep_enough = window >= CONTEXT if exact else window > 0
    return text_searched, found if text_searched == text and deep_enough else None
