"""The shipped demo corpus parses and its duplicate groups are consistent."""

from collections import Counter
from pathlib import Path

import pytest

from qres.corpus.readers import read_corpus
from qres.text import bm25_terms

DEMO = Path(__file__).resolve().parents[1] / "qres/data/demo"
USB_GROUP = "usb-boot-install"


@pytest.fixture(scope="module")
def questions():
    return list(read_corpus(DEMO / "questions.tsv", "tsv"))


@pytest.fixture(scope="module")
def groups() -> dict[str, list[str]]:
    lines = (DEMO / "duplicates.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0].split("\t") == ["group", "ids"]
    parsed: dict[str, list[str]] = {}
    for number, line in enumerate(lines[1:], 2):
        name, _, ids = line.partition("\t")
        assert name and ids, f"duplicates.tsv:{number}: expected 'group<TAB>ids'"
        assert name not in parsed, f"duplicates.tsv:{number}: group {name!r} repeated"
        parsed[name] = ids.split()
    return parsed


def test_questions_parse_with_unique_ids_and_titles(questions):
    assert len(questions) >= 300
    ids = Counter(q.id for q in questions)
    assert [qid for qid, n in ids.items() if n > 1] == []
    assert [q.id for q in questions if not q.title.strip()] == []
    assert [q.id for q in questions if not q.body.strip()] == []
    assert all(q.tags for q in questions)


def test_header_is_the_documented_one():
    with open(DEMO / "questions.tsv", encoding="utf-8") as f:
        assert f.readline().rstrip("\n").split("\t") == ["id", "title", "body", "tags"]


def test_duplicate_groups_refer_to_existing_questions(questions, groups):
    known = {q.id for q in questions}
    assert len(groups) >= 30
    for name, ids in groups.items():
        assert len(ids) >= 2, f"group {name} has fewer than 2 members"
        assert set(ids) <= known, f"group {name} names unknown ids {set(ids) - known}"
    membership = Counter(qid for ids in groups.values() for qid in ids)
    assert [qid for qid, n in membership.items() if n > 1] == []


def test_usb_boot_group_matches_the_readme_query(questions, groups):
    by_id = {q.id: q for q in questions}
    members = groups[USB_GROUP]
    assert len(members) >= 4
    query = set(bm25_terms("boot ubuntu from usb"))
    matches_all = [qid for qid in members if query <= set(bm25_terms(by_id[qid].text))]
    assert len(matches_all) >= 2
    # at least one paraphrase that plain keyword search would struggle with
    assert any(len(query & set(bm25_terms(by_id[qid].text))) <= 1 for qid in members)
