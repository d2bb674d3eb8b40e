"""Elasticsearch and the embedded backend index and search the same terms, for every text.

qres computes the BM25 terms itself (:func:`qres.text.bm25_terms`) and sends them to
Elasticsearch as space-separated ``title_terms``/``body_terms``; the index template's analyzer
only has to split them back. :class:`TemplateAnalyzer` reads that analysis chain from
``es_config/questions-template.json`` and applies it step by step with a model of each
Lucene building block it declares; a building block without a model fails the test, so a
template edit cannot slip an unmodelled step (a stemmer, a char filter) past it.

What is verified here: the declared chain, applied as Lucene's WhitespaceTokenizer documents
it (``Character.isWhitespace`` splits, tokens cut every ``max_token_length`` UTF-16 units),
gives back ``bm25_terms`` exactly, on every subject, body and comment of the SemEval-2016
XML files. What is not verified without a cluster: that a real Elasticsearch applies the chain
as modelled. ``test_cluster_analyze_matches_bm25_terms`` in the contract suite checks that
with ``_analyze`` when ``QRES_ES_URL`` is set.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from qres.backends.elasticsearch import CONFIG_DIR, bm25_query
from qres.backends.elasticsearch.requests import terms_fields
from qres.text import MAX_TERM_CHARS, bm25_terms

SEMEVAL_FILES = ("SemEval2016-Task3-CQA-QL-train-part2.xml", "SemEval2016-Task3-CQA-QL-dev.xml")
TEXT_TAGS = ("OrgQSubject", "OrgQBody", "RelQSubject", "RelQBody", "RelCText")

# java.lang.Character.isWhitespace: Unicode space separators except the no-break ones, line
# and paragraph separators, and these ASCII controls.
_JAVA_NO_BREAK = {"\u00a0", "\u2007", "\u202f"}
_JAVA_CONTROL_SPACE = set("\t\n\u000b\f\r\u001c\u001d\u001e\u001f")


def java_is_whitespace(char: str) -> bool:
    import unicodedata

    if char in _JAVA_CONTROL_SPACE:
        return True
    return unicodedata.category(char) in ("Zs", "Zl", "Zp") and char not in _JAVA_NO_BREAK


def utf16_units(char: str) -> int:
    return 2 if ord(char) > 0xFFFF else 1


def whitespace_tokenizer(text: str, max_token_length: int = 255) -> list[str]:
    """Lucene's WhitespaceTokenizer (a CharTokenizer): runs of non-whitespace characters, a
    token cut off once it holds ``max_token_length`` UTF-16 units."""
    tokens, current, length = [], [], 0
    for char in text:
        if java_is_whitespace(char):
            if current:
                tokens.append("".join(current))
            current, length = [], 0
            continue
        if length + utf16_units(char) > max_token_length and current:
            tokens.append("".join(current))
            current, length = [], 0
        current.append(char)
        length += utf16_units(char)
    if current:
        tokens.append("".join(current))
    return tokens


class TemplateAnalyzer:
    """The analyzer a template field declares, applied with a model of each building block."""

    def __init__(self, template: dict, field: str):
        index = template["template"]["settings"]["index"]
        analysis = index.get("analysis", {})
        mapping = template["template"]["mappings"]["properties"][field]
        name = mapping.get("search_analyzer", mapping.get("analyzer", "standard"))
        if mapping.get("search_analyzer", name) != mapping.get("analyzer", name):
            raise AssertionError(f"{field}: index and search analyzers differ")
        analyzer = analysis.get("analyzer", {}).get(name)
        if analyzer is None or analyzer.get("type") != "custom":
            raise NotImplementedError(f"{field}: analyzer {name!r} is not a modelled custom one")
        self.char_filters = analyzer.get("char_filter", [])
        self.filters = analyzer.get("filter", [])
        tokenizer = analyzer["tokenizer"]
        self.tokenizer = analysis.get("tokenizer", {}).get(tokenizer, {"type": tokenizer})

    def analyze(self, text: str) -> list[str]:
        for char_filter in self.char_filters:
            raise NotImplementedError(f"no model of char filter {char_filter!r}")
        kind = self.tokenizer["type"]
        if kind != "whitespace" or set(self.tokenizer) - {"type", "max_token_length"}:
            raise NotImplementedError(f"no model of tokenizer {self.tokenizer!r}")
        tokens = whitespace_tokenizer(text, self.tokenizer.get("max_token_length", 255))
        for token_filter in self.filters:
            if token_filter != "lowercase":
                raise NotImplementedError(f"no model of token filter {token_filter!r}")
            tokens = [t.lower() for t in tokens]  # bm25_terms are lower case already
        return tokens


@pytest.fixture(scope="module")
def template() -> dict:
    return json.loads((CONFIG_DIR / "questions-template.json").read_text())


@pytest.fixture(scope="module")
def forum_texts(shared_data) -> list[str]:
    texts = []
    for name in SEMEVAL_FILES:
        root = ET.parse(shared_data / "semeval2016-task3" / name).getroot()
        for tag in TEXT_TAGS:
            texts.extend(el.text for el in root.iter(tag) if el.text)
    return texts


def test_the_sample_is_large_and_has_the_hard_cases(forum_texts):
    assert len(forum_texts) > 10_000
    joined = "\n".join(forum_texts)
    for hard in ("'s ", "n't", "'re", "-", "’"):
        assert hard in joined, hard
    assert any(ch.isdigit() for ch in joined)
    assert any(ord(ch) > 127 and ch.isalpha() for ch in joined)  # non-ASCII letters


@pytest.mark.parametrize("analyzer", ["english", "plain"])
def test_indexed_terms_are_bm25_terms_for_every_forum_text(template, forum_texts, analyzer):
    title_field = TemplateAnalyzer(template, "title_terms")
    body_field = TemplateAnalyzer(template, "body_terms")
    language = "english" if analyzer == "english" else None
    mismatches = []
    for text in forum_texts:
        fields = terms_fields(text, text, analyzer)
        expected = bm25_terms(text, language)
        for model, value in (
            (title_field, fields["title_terms"]),
            (body_field, fields["body_terms"]),
        ):
            if model.analyze(value) != expected:
                mismatches.append(text[:80])
    assert mismatches == []


def test_query_terms_are_the_distinct_bm25_terms_for_every_forum_text(template, forum_texts):
    field = TemplateAnalyzer(template, "title_terms")
    for text in forum_texts:
        query = bm25_query(text, "english", 2.0)
        expected = list(dict.fromkeys(bm25_terms(text)))
        if not expected:
            assert query is None
            continue
        assert field.analyze(query["multi_match"]["query"]) == expected, text[:80]


@pytest.mark.parametrize(
    "text",
    [
        "Can't you're John's well-known e-mail?",  # apostrophes, possessive, hyphens
        "v1.2 3.5kg 2016 10,000 abc.123",  # digits and inner dots
        "Café naïve São Paulo ДОБРО пожаловать 東京タワー",  # non-ASCII letters
        "ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ",  # NFKC folds these
        "a\u00a0b\u2007c\u202fd\u3000e",  # spaces Java does not count as whitespace
        "x" * 300 + " " + "y" * MAX_TERM_CHARS + " " + "\U00020000" * MAX_TERM_CHARS,
    ],
)
def test_hard_texts(template, text):
    model = TemplateAnalyzer(template, "body_terms")
    for analyzer, language in (("english", "english"), ("plain", None)):
        assert model.analyze(terms_fields(text, text, analyzer)["body_terms"]) == bm25_terms(
            text, language
        )


def test_unmodelled_building_blocks_fail_loudly(template):
    changed = json.loads(json.dumps(template))
    analyzers = changed["template"]["settings"]["index"]["analysis"]["analyzer"]
    analyzers["qres_terms"]["filter"] = ["porter_stem"]
    with pytest.raises(NotImplementedError, match="porter_stem"):
        TemplateAnalyzer(changed, "title_terms").analyze("x")
    analyzers["qres_terms"] = {"type": "custom", "tokenizer": "standard"}
    with pytest.raises(NotImplementedError, match="standard"):
        TemplateAnalyzer(changed, "title_terms").analyze("x")


def test_whitespace_tokenizer_model():
    assert whitespace_tokenizer("a  b\tc\u00a0d") == ["a", "b", "c\u00a0d"]
    assert whitespace_tokenizer("abcdef", max_token_length=4) == ["abcd", "ef"]
    assert whitespace_tokenizer("\U00020000" * 3, max_token_length=4) == ["\U00020000" * 2] + [
        "\U00020000"
    ]
