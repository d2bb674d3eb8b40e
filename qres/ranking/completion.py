"""While a title is being typed, its last word is often unfinished ("boot ubuntu from us").

BM25 matches nothing with "us"-as-typed and an encoder reads it as another word, so a search
of typed text (``qres search --typing``, the widget's ``/search?typing=true``) first
completes the last word: to the word starting with it that is most frequent in the titles of
the text's :data:`CONTEXT` best BM25 matches (ties: the one met first, best match first).
Those titles are the forum's own words in the text's own topic, so "schengen vi" becomes
"schengen visa" where a dictionary would not know. Where none of those titles has a word it
starts, as for a first word being typed ("schen", which no question matches yet), it becomes
the word it starts that the most titles of the whole forum hold (``Backend.title_words``;
ties alphabetically), once it has :data:`FORUM_WORDS_FROM` characters. A last word that
nothing extends, or text that ends in a space or punctuation (the word is finished), is
searched as typed.

Chosen on the travel forum's train split (864 duplicates, each title cut to its first 12, 20
and 30 characters, MiniLM exact cosine, nDCG@10 on the text alone): as typed 5.29 / 12.81 /
20.92; completed from the 50 best matches' titles 7.98 / 16.17 / 24.06; from the most
frequent word of the whole forum 7.10 / 15.06 / 22.75; leaving the unfinished word out
5.27 / 12.70 / 20.87; the whole words the author went on to type (the most there is to
gain) 9.50 / 17.87 / 24.74. The whole forum's words where the best matches' titles have
none were added later, chosen on the same split through ``qres evaluate --typing`` (the
``minilm`` set, hybrid; titles cut to 6 / 8 / 12 characters): 2.87 / 4.15 / 8.32 without,
4.20 / 4.57 / 8.36 with them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from qres.backends.base import Backend, Candidates
from qres.text import normalize, tokenize

CONTEXT = 50  # the best BM25 matches whose titles complete the last word
# Characters a word needs before the whole forum's titles complete it (the widget's own
# minimum): shorter ones cost the most to count (8.8 ms for one letter at 300,000 questions,
# 0.7 ms for three) and say the least ("s" becomes "should").
FORUM_WORDS_FROM = 3
# A word as qres.text tokenises one (inner - ' . kept), at the very end of the text.
_LAST_WORD = re.compile(r"\w+(?:['’.\-]\w+)*$")


def first_words(backend: Backend) -> str:
    """How ``backend``'s index searches a first word being typed, in words for an operator
    (``qres info``, ``qres serve``'s start)."""
    if backend.completes_first_words:
        return "completed from the titles' words"
    rewrite = "`qres compact`" if backend.name == "embedded" else "`qres index --rebuild CORPUS`"
    return f"searched as typed: made before titles' words were indexed ({rewrite} adds them)"


def last_word(text: str) -> str | None:
    """The word ``text`` ends with, normalised as the encoders' tokens are (``wi-f``, not
    ``f``), or None where it ends in a space or punctuation."""
    found = _LAST_WORD.search(text)
    return normalize(found.group()) if found else None


def complete(text: str, titles: Iterable[str]) -> str:
    """``text`` with its last word replaced by the word of ``titles`` (best match first)
    that starts with it and is most frequent there; ``text`` itself where none does."""
    word = last_word(text)
    return _ending_in(text, _most_frequent(word, titles) if word is not None else None)


def completed(
    backend: Backend, text: str, window: int, exact: bool = True
) -> tuple[str, Candidates | None]:
    """``text`` completed from the titles of its best matches in ``backend`` (where none
    has a word its last word starts, from the whole forum's titles), and, where that left it
    as typed, the BM25 top it read them from (:data:`CONTEXT` or ``window``, the more): what
    a search would otherwise search again. ``exact``: only where that is the top ``window``
    itself (hybrid rescores all of it; BM25 reads its first ``window``)."""
    word = last_word(text)
    if word is None:
        return text, None
    found = backend.candidates(text, max(window, CONTEXT))
    ids = found.ids(range(min(CONTEXT, len(found))))
    stored = found.stored(ids, backend.fetch)
    completion = _most_frequent(word, [stored[i].title for i in ids if i in stored])
    if completion is None and len(word) >= FORUM_WORDS_FROM:  # e.g. a first word being typed
        forum_words = backend.title_words(word, 1)
        completion = forum_words[0][0] if forum_words else None
    text_searched = _ending_in(text, completion)
    deep_enough = window >= CONTEXT if exact else window > 0
    return text_searched, found if text_searched == text and deep_enough else None


def _most_frequent(word: str, titles: Iterable[str]) -> str | None:
    """The word of ``titles`` that starts with ``word`` and is most frequent there (equal
    counts: the one met first); None where none does."""
    counts = Counter(t for title in titles for t in tokenize(title) if t.startswith(word))
    return counts.most_common(1)[0][0] if counts else None  # Counter keeps first-met order


def _ending_in(text: str, completion: str | None) -> str:
    """``text`` with its last word replaced by ``completion`` (None: as it is)."""
    return text if completion is None else _LAST_WORD.sub(lambda _: completion, text)
