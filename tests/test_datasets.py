"""Labelled sets: SemEval XML/CSV, AskUbuntu dev/test/train, pairwise files."""

from __future__ import annotations

import csv
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from qres.corpus.readers import CorpusError, Question
from qres.datasets.benchmarks import (
    load_askubuntu_eval,
    load_pairwise,
    load_semeval_csv,
    load_semeval_xml,
    read_askubuntu_train,
)
from qres.evaluation.ranking_metrics import summarize

SEMEVAL = "semeval2016-task3"
DEV_XML = "SemEval2016-Task3-CQA-QL-dev.xml"
PART2_XML = "SemEval2016-Task3-CQA-QL-train-part2.xml"
PART1_CSV = "train-part1-subtaskB.csv"


def expected_semeval(path: Path) -> dict[str, tuple[list[str], set[str]]]:
    """Independent reading: {original id: (related ids by ranking order, relevant ids)}."""
    expected: dict[str, tuple[list[tuple[int, str]], set[str]]] = {}
    for org in ET.parse(path).getroot().iter("OrgQuestion"):
        ranked, relevant = expected.setdefault(org.get("ORGQ_ID"), ([], set()))
        for rel in org.iter("RelQuestion"):
            ranked.append((int(rel.get("RELQ_RANKING_ORDER")), rel.get("RELQ_ID")))
            if rel.get("RELQ_RELEVANCE2ORGQ") in ("PerfectMatch", "Relevant"):
                relevant.add(rel.get("RELQ_ID"))
    return {qid: ([rid for _, rid in sorted(r)], rel) for qid, (r, rel) in expected.items()}


# --- SemEval ----------------------------------------------------------------------------------


def test_semeval_dev_xml(shared_data):
    path = shared_data / SEMEVAL / DEV_XML
    labelled = load_semeval_xml(path)
    expected = expected_semeval(path)
    assert len(labelled.queries) == 50
    assert [q.id for q in labelled.queries] == list(expected)
    for query in labelled.queries:
        assert len(query.candidates) == 10
        assert (query.candidates, set(query.relevant)) == expected[query.id]
    assert sum(len(q.relevant) for q in labelled.queries) == 59 + 155  # PerfectMatch + Relevant
    assert len(labelled.questions) == 500
    first = labelled.queries[0]
    assert first.question == Question(
        "Q268", "Good Bank", "Which is a good bank as per your experience in Doha"
    )
    best_bank = labelled.questions["Q268_R4"]
    assert (best_bank.title, best_bank.tags) == ("Best Bank", ("Advice and Help",))


def test_semeval_relevance_counted_from_the_raw_xml(shared_data):
    text = (shared_data / SEMEVAL / DEV_XML).read_text(encoding="utf-8")
    relevant_in_file = text.count('RELQ_RELEVANCE2ORGQ="PerfectMatch"') + text.count(
        'RELQ_RELEVANCE2ORGQ="Relevant"'
    )
    labelled = load_semeval_xml(shared_data / SEMEVAL / DEV_XML)
    assert sum(len(q.relevant) for q in labelled.queries) == relevant_in_file


def test_semeval_train_part2_xml(shared_data):
    path = shared_data / SEMEVAL / PART2_XML
    labelled = load_semeval_xml(path)
    expected = expected_semeval(path)
    assert len(labelled.queries) == 67
    assert {q.id: (q.candidates, set(q.relevant)) for q in labelled.queries} == expected


def test_semeval_xml_sorts_by_numeric_ranking_order(tmp_path):
    related = [("R10", 10, "Relevant"), ("R2", 2, "Irrelevant"), ("R1", 1, "PerfectMatch")]
    threads = "".join(
        f'<Thread><RelQuestion RELQ_ID="{rid}" RELQ_RANKING_ORDER="{order}"'
        f' RELQ_RELEVANCE2ORGQ="{label}" RELQ_CATEGORY="Pets">'
        f"<RelQSubject>s {rid}</RelQSubject><RelQBody>b</RelQBody></RelQuestion></Thread>"
        for rid, order, label in related
    )
    path = tmp_path / "q.xml"
    path.write_text(
        f'<xml><OrgQuestion ORGQ_ID="Q1"><OrgQSubject>t</OrgQSubject><OrgQBody>b</OrgQBody>'
        f"{threads}</OrgQuestion></xml>",
        encoding="utf-8",
    )
    [query] = load_semeval_xml(path).queries
    assert query.candidates == ["R1", "R2", "R10"]
    assert query.relevant == {"R1", "R10"}


def test_semeval_xml_malformed(tmp_path):
    path = tmp_path / "q.xml"
    path.write_text("<xml>\n<OrgQuestion ORGQ_ID='Q1'>\n</xml>\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"q\.xml:3: malformed XML"):
        load_semeval_xml(path)


def test_semeval_part1_csv(shared_data):
    path = shared_data / SEMEVAL / PART1_CSV
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    labelled = load_semeval_csv(path)
    assert len(labelled.queries) == 200
    assert [(q.id, c) for q in labelled.queries for c in q.candidates] == [
        (r["question1_id"], r["question2_id"]) for r in rows
    ]
    assert {(q.id, c) for q in labelled.queries for c in q.relevant} == {
        (r["question1_id"], r["question2_id"]) for r in rows if r["relevance"] == "1"
    }
    assert len(labelled.questions) == 1999
    first = labelled.queries[0]
    assert first.question == Question("Q1", "Massage oil", "Where I can buy good oil for massage?")


def test_semeval_csv_bad_relevance(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text(
        "id,question1_id,question2_id,question1,question2,relevance\n"
        "0,Q1,R1,a. b,c. d,1\n"
        "1,Q1,R2,a. b,c. d,yes\n",
        encoding="utf-8",
    )
    with pytest.raises(CorpusError, match=r"b\.csv:3: relevance must be 0 or 1, got 'yes'"):
        load_semeval_csv(path)


def test_semeval_dev_reference_figures(shared_data):
    # SemEval-2016 subtask B official baseline: the given (search engine) order.
    labelled = load_semeval_xml(shared_data / SEMEVAL / DEV_XML)
    scores = summarize([[c in q.relevant for c in q.candidates] for q in labelled.queries])
    assert scores["queries"] == 50  # queries without a relevant candidate count as 0
    assert (round(scores["MAP"], 2), round(scores["MRR"], 2)) == (71.35, 76.67)


# --- AskUbuntu --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dev.txt", "test.txt"])
def test_askubuntu_eval_files(shared_data, name):
    queries = load_askubuntu_eval(shared_data / "askubuntu" / name)
    assert len(queries) == 200
    for query in queries:
        assert len(query.candidates) == 20
        assert len(query.given_scores) == 20
        assert query.relevant <= set(query.candidates)
    assert any(not q.relevant for q in queries)  # the few queries Lei et al. drop


def bm25_figures(path: Path) -> dict[str, float]:
    rankings = []
    for query in load_askubuntu_eval(path):
        by_score = sorted(
            zip(query.given_scores, query.candidates, strict=True), key=lambda sc: -sc[0]
        )
        rankings.append([candidate in query.relevant for _, candidate in by_score])
    scores = summarize(rankings, skip_without_relevant=True)
    return {name: round(scores[name], 1) for name in ("MAP", "MRR", "P@1", "P@5")}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dev.txt", {"MAP": 52.0, "MRR": 66.0, "P@1": 51.9, "P@5": 42.1}),
        ("test.txt", {"MAP": 56.0, "MRR": 68.0, "P@1": 53.8, "P@5": 42.5}),
    ],
)
def test_askubuntu_bm25_reference_figures(shared_data, name, expected):
    # The BM25 row of Lei et al. (2016), Table 2, from the Lucene scores shipped in the files.
    assert bm25_figures(shared_data / "askubuntu" / name) == expected


def test_askubuntu_eval_small_file(tmp_path):
    path = tmp_path / "dev.txt"
    path.write_text("1\t3\t2 3 4\t9.5 8 7.25\n\n5\t\t6 7\t1 0.5\n", encoding="utf-8")
    first, second = load_askubuntu_eval(path)
    assert (first.id, first.candidates, first.relevant, first.given_scores) == (
        "1",
        ["2", "3", "4"],
        {"3"},
        [9.5, 8.0, 7.25],
    )
    assert (second.id, second.candidates, second.relevant) == ("5", ["6", "7"], frozenset())


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ("9\t2\t2 3", "expected 4 tab-separated fields, found 3"),
        ("9\t2\t2 3\t1.0 2.0\textra", "expected 4 tab-separated fields, found 5"),
        ("9\t2\t2 3\t1.0", "2 candidates but 1 scores"),
        ("9\t2\t2 3\t1.0 high", "BM25 scores must be numbers"),
    ],
)
def test_askubuntu_eval_bad_lines(tmp_path, bad_line, problem):
    path = tmp_path / "dev.txt"
    path.write_text(f"1\t3\t2 3\t9.5 8\n{bad_line}\n", encoding="utf-8")
    with pytest.raises(CorpusError) as info:
        load_askubuntu_eval(path)
    assert str(info.value) == f"{path}:2: {problem}"


def test_read_askubuntu_train(tmp_path):
    path = tmp_path / "train_random.txt"
    path.write_text(
        "240299\t168608 390642\t368007 70009 48077\n\n121116\t278152\t373136 325070\n",
        encoding="utf-8",
    )
    queries = read_askubuntu_train(path)
    first = next(queries)
    assert (first.id, first.positives, first.negatives) == (
        "240299",
        ["168608", "390642"],
        ["368007", "70009", "48077"],
    )
    [second] = list(queries)
    assert (second.id, second.positives, second.negatives) == (
        "121116",
        ["278152"],
        ["373136", "325070"],
    )


def test_read_askubuntu_train_bad_line(tmp_path):
    path = tmp_path / "train_random.txt"
    path.write_text("1\t2\t3 4\n5\t6\n", encoding="utf-8")
    queries = read_askubuntu_train(path)
    assert next(queries).id == "1"  # streamed: the bad line only raises when reached
    with pytest.raises(CorpusError, match=r"train_random\.txt:2: expected 3 tab-separated"):
        next(queries)


# --- pairwise ---------------------------------------------------------------------------------


def test_load_pairwise(tmp_path):
    pos, neg = tmp_path / "dev.pos.txt", tmp_path / "dev.neg.txt"
    pos.write_text("q1 a\nq1 b\n\nq2 c\n", encoding="utf-8")
    neg.write_text("q1 x\nq2 y\nq2 z\nq3 w\n", encoding="utf-8")
    assert load_pairwise(pos, neg) == {
        "q1": {"a": 1, "b": 1, "x": 0},
        "q2": {"c": 1, "y": 0, "z": 0},
        "q3": {"w": 0},
    }


def test_load_pairwise_bad_line(tmp_path):
    pos, neg = tmp_path / "dev.pos.txt", tmp_path / "dev.neg.txt"
    pos.write_text("q1 a\n", encoding="utf-8")
    neg.write_text("q1 x\nq1 y z\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"dev\.neg\.txt:2: expected 'query_id candidate_id'"):
        load_pairwise(pos, neg)
