"""The one text normaliser and tokeniser of qres.

Training, indexing, search and ONNX export all call these functions, so a question is
split into the same tokens wherever it is seen. Two views of the same tokens exist:

* ``tokenize`` — what the neural encoders read: lower-cased words and punctuation marks,
  the same shape as the AskUbuntu ``text_tokenized`` corpus (re-tokenising already
  tokenised text is the identity).
* ``bm25_terms`` — what the BM25 index stores and the query is matched against: the word
  tokens of ``tokenize``, split at hyphens and apostrophes, English stop words removed and
  Snowball (Porter2) stemmed, close to Lucene's English analyzer.

Both backends index and search exactly these terms: the embedded one hands them to tantivy,
the Elasticsearch one to a whitespace-only analyzer (``es_config/questions-template.json``),
so no engine analyses text on its own.
"""

from __future__ import annotations

import html
import re
import unicodedata
from functools import lru_cache

import Stemmer

# Papers truncate bodies to 100 words for the encoders (Lei et al. 2016).
BODY_MAX_TOKENS = 100
TITLE_MAX_TOKENS = 40

_TOKEN = re.compile(r"\w+(?:['’.\-]\w+)*|[^\w\s]")
_WORD_PARTS = re.compile(r"['’\-]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Longer "words" (base64, hashes run together) carry no search value, and engines limit term
# sizes (Lucene splits tokens at 255 characters by default and rejects terms over 32 kB).
MAX_TERM_CHARS = 255

# Lucene's English stop-word set (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET).
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the "
    "their then there these they this to was will with".split()
)

_stemmer = Stemmer.Stemmer("english")


def normalize(text: str) -> str:
    """Unicode-normalise, unescape HTML entities, drop control characters, lower-case."""
    text = html.unescape(text)
    text = unicodedata.normalize("NFKC", text)
    text = _CONTROL.sub(" ", text)
    return text.lower()


def tokenize(text: str, max_tokens: int | None = None) -> list[str]:
    """Encoder tokens of ``text``: words (keeping inner ``-``, ``'`` and ``.``) and punctuation."""
    tokens = _TOKEN.findall(normalize(text))
    return tokens if max_tokens is None else tokens[:max_tokens]


def words(text: str) -> list[str]:
    """The distinct words of ``text`` in order, as :func:`tokenize` splits them (its
    punctuation and words past :data:`MAX_TERM_CHARS` left out): what completes a word being
    typed (``qres.ranking.completion``)."""
    return [t for t in dict.fromkeys(tokenize(text)) if _is_word(t) and len(t) <= MAX_TERM_CHARS]


def _is_word(token: str) -> bool:
    """Whether a :func:`tokenize` token is a word rather than punctuation (which carries no
    search signal)."""
    return token[0].isalnum() or token[0] == "_"


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return _stemmer.stemWord(word)


def bm25_terms(text: str, language: str | None = "english") -> list[str]:
    """Index/query terms of ``text`` for BM25: word parts, stop words removed, stemmed.

    ``language=None`` keeps every word part unstemmed (the "plain" analyzer). Parts longer than
    :data:`MAX_TERM_CHARS` are dropped.
    """
    if language is None:
        return [
            p
            for t in tokenize(text)
            if _is_word(t)
            for p in _WORD_PARTS.split(t)
            if p and len(p) <= MAX_TERM_CHARS
        ]
    terms = []
    for token in tokenize(text):
        if not _is_word(token):
            continue
        for part in _WORD_PARTS.split(token):
            if part and part != "s" and part not in STOP_WORDS and len(part) <= MAX_TERM_CHARS:
                terms.append(_stem(part))
    return terms
