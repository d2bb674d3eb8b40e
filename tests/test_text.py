"""The one tokenizer: encoder tokens, BM25 terms, normalisation."""

from __future__ import annotations

import pytest

from qres.text import STOP_WORDS, bm25_terms, normalize, tokenize


def test_tokenize_lower_cases():
    assert tokenize("Ubuntu GRUB") == ["ubuntu", "grub"]


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("don't", ["don't"]),
        ("don’t", ["don’t"]),
        ("state-of-the-art", ["state-of-the-art"]),
        ("x.y.z", ["x.y.z"]),
        ("python3.8-dev", ["python3.8-dev"]),
        ("e.g.", ["e.g", "."]),
        ("'quoted'", ["'", "quoted", "'"]),
        ("-flag", ["-", "flag"]),
        ("end.", ["end", "."]),
    ],
)
def test_tokenize_keeps_inner_hyphen_apostrophe_and_dot(text, tokens):
    assert tokenize(text) == tokens


def test_tokenize_splits_punctuation_into_single_marks():
    assert tokenize("Why?! (really), ok...") == [
        "why",
        "?",
        "!",
        "(",
        "really",
        ")",
        ",",
        "ok",
        ".",
        ".",
        ".",
    ]


def test_tokenize_matches_askubuntu_tokenized_shape():
    # A line of the AskUbuntu text_tokenized corpus is already tokenised: it comes back as is.
    line = "update manager is constantly offering me updates ( e.g . security fixes ) ."
    assert tokenize(line) == line.split()


IDEMPOTENCE_CASES = [
    "How do I enable automatic updates? (e.g. security fixes, PPAs)",
    "Don't boot Ubuntu's state-of-the-art kernel 3.13.0-24!",
    "&amp;amp; &lt;b&gt;bold&lt;/b&gt; &#39;x&#39; &quot",
    "½ ﬁle ＡＢＣ ｔｅｓｔ ＇x＇ Ⅻ ①",
    "İstanbul ΑΣ ß ẞ K Ω",
    "x\u0301 café´ e\u0308",
    "tab\there\x00nul\x7fdel\u2028sep\u00a0nbsp\u3000wide",
    "a--b a..b a''b 'a' -a- .a.",
    "__init__ foo_bar 12,345.67 #hash @user C++ C#",
    "日本語のテキスト 中文 한국어 עברית العربية",
    "",
    "   ",
]


@pytest.mark.parametrize("text", IDEMPOTENCE_CASES)
def test_tokenize_is_idempotent_on_its_joined_output(text):
    tokens = tokenize(text)
    assert tokenize(" ".join(tokens)) == tokens


def test_tokenize_max_tokens():
    text = "one two three four five"
    assert tokenize(text, max_tokens=3) == ["one", "two", "three"]
    assert tokenize(text, max_tokens=10) == text.split()
    assert tokenize(text, max_tokens=0) == []
    assert tokenize(text) == text.split()


def test_bm25_terms_removes_stop_words():
    assert bm25_terms("The kernel is not in the list of it") == ["kernel", "list"]
    assert not STOP_WORDS & set(bm25_terms(" ".join(sorted(STOP_WORDS))))


@pytest.mark.parametrize(
    ("word", "stem"),
    [("booting", "boot"), ("Installed", "instal"), ("updates", "updat"), ("drivers", "driver")],
)
def test_bm25_terms_stems(word, stem):
    assert bm25_terms(word) == [stem]


def test_bm25_terms_splits_hyphen_and_apostrophe_parts():
    assert bm25_terms("dual-boot") == ["dual", "boot"]
    assert bm25_terms("rock'n'roll") == ["rock", "n", "roll"]
    # The stop words inside a hyphenated word go too.
    assert bm25_terms("state-of-the-art") == ["state", "art"]


@pytest.mark.parametrize("text", ["Ubuntu's", "Ubuntu’s", "ubuntu"])
def test_bm25_terms_drops_possessive_s(text):
    assert bm25_terms(text) == ["ubuntu"]


def test_bm25_terms_keeps_inner_dots_and_drops_punctuation():
    assert bm25_terms("Ubuntu 14.04 ( e.g . ) ?!") == ["ubuntu", "14.04", "e.g"]


def test_bm25_terms_plain_mode_keeps_words_unstemmed():
    assert bm25_terms("Booting the dual-boot drivers!", language=None) == [
        "booting",
        "the",
        "dual",
        "boot",
        "drivers",
    ]


def test_normalize_unescapes_html_entities():
    assert normalize("&lt;b&gt; AT&amp;T &#39;x&#39; &eacute;") == "<b> at&t 'x' é"


def test_normalize_applies_nfkc():
    # Ligature, full-width letters, a superscript and a decomposed accent all fold.
    assert normalize("ﬁle ＡＢ x² e\u0301") == "file ab x2 é"


def test_normalize_replaces_control_characters_and_lower_cases():
    assert normalize("A\x00B\x1fC\x7fD\tE\nF") == "a b c d\te\nf"
