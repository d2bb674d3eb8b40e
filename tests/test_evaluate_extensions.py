"""`qres evaluate` extensions: Android pairwise data (AUC(0.05)), Accuracy@k over the whole
corpus, and the bow-cnn ranker."""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import CorpusError, Question
from qres.datasets.benchmarks import load_android
from qres.evaluation import runner as ev
from qres.evaluation.rankers import BowCnnRanker
from qres.indexing.pipeline import index_questions
from qres.text import tokenize
from tests.askubuntu_fixture import FIXTURE

# Twelve questions built so that BM25 over the whole corpus ranks, for each query:
# a1 → a2 (relevant) first once a1 itself is left out;
# b1 → never b2 (relevant, no word in common with b1);
# c1 → c3 (an unlabelled near copy) first, c2 (relevant) second;
# d1 has no relevant question, so Acc@k leaves it out.
QUESTIONS = {
    "a1": ("mount encrypted partition", "how to mount a luks encrypted partition"),
    "a2": ("encrypted partition mount at boot", "luks partition fails to mount at boot"),
    "b1": ("broadcom wifi driver", "wifi driver for broadcom chip missing"),
    "b2": ("wireless adapter not detected", "network device invisible in settings"),
    "b3": ("install broadcom wifi driver offline", "driver package for wifi without internet"),
    "c1": ("grub menu hidden", "grub menu never shows at startup"),
    "c2": ("grub menu timeout", "change how long the boot menu waits"),
    "c3": ("grub menu hidden after update", "grub menu never shows at startup since update"),
    "d1": ("sound crackles", "audio crackling with headphones"),
    "d2": ("headphones silent", "no audio from headphones jack"),
    "f1": ("keyboard layout switch", "change keyboard layout shortcut"),
    "f2": ("printer offline", "printer shows offline status"),
}
POSITIVES = [("a1", "a2"), ("b1", "b2"), ("c1", "c2")]
NEGATIVES = [
    ("a1", "b3"),
    ("a1", "f1"),
    ("b1", "b3"),
    ("c1", "c3"),
    ("c1", "d2"),
    ("d1", "d2"),
    ("d1", "f1"),
]
# Hits by construction: a1 at 1; c1 at 2; b1 never. Three queries have a relevant question.
EXPECTED_ACCURACY = {"Acc@1": 100 / 3, "Acc@2": 200 / 3, "Acc@3": 200 / 3}


def corpus_lines(questions=QUESTIONS) -> str:
    return "".join(f"{qid}\t{title}\t{body}\n" for qid, (title, body) in questions.items())


def write_android(root: Path, positives=POSITIVES, negatives=NEGATIVES, split="dev") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.tsv").write_text(corpus_lines())
    (root / f"{split}.pos.txt").write_text("".join(f"{q} {c}\n" for q, c in positives))
    (root / f"{split}.neg.txt").write_text("".join(f"{q} {c}\n" for q, c in negatives))
    return root


def question(qid: str) -> Question:
    return Question(qid, *QUESTIONS[qid])


def labelled_pairs():
    """{query: [(candidate, label)]} in file order, positives first."""
    pairs: dict[str, list[tuple[str, int]]] = {}
    for (q, c), label in [(p, 1) for p in POSITIVES] + [(n, 0) for n in NEGATIVES]:
        pairs.setdefault(q, []).append((c, label))
    return pairs


def partial_auc_percent(labels, scores, max_fpr=0.05) -> float:
    """scikit-learn's McClish-standardised partial AUC turned back into area / max_fpr."""
    standardised = roc_auc_score(labels, scores, max_fpr=max_fpr)
    low, high = max_fpr**2 / 2, max_fpr
    return 100 * (low + (2 * standardised - 1) * (high - low)) / max_fpr


def expected_figures(score_of) -> tuple[float, float]:
    """(AUC(0.05), MAP) in percent from ``score_of(query, candidates) -> scores``, computed
    here without qres.evaluation.ranking_metrics: MAP over queries with a positive, by sorting each
    list."""
    labels, scores, aps = [], [], []
    for qid, pairs in labelled_pairs().items():
        candidate_scores = score_of(qid, [c for c, _ in pairs])
        for (_, label), score in zip(pairs, candidate_scores, strict=True):
            labels.append(label)
            scores.append(score)
        positives = [s for (_, lab), s in zip(pairs, candidate_scores, strict=True) if lab]
        negatives = [s for (_, lab), s in zip(pairs, candidate_scores, strict=True) if not lab]
        # Ties across the labels would make the ranking depend on tie-breaking.
        assert not set(positives) & set(negatives), (qid, candidate_scores)
        if positives:
            ranked = sorted(
                zip(candidate_scores, (lab for _, lab in pairs), strict=True), reverse=True
            )
            found, precisions = 0, []
            for rank, (_, label) in enumerate(ranked, 1):
                if label:
                    found += 1
                    precisions.append(found / rank)
            aps.append(sum(precisions) / len(positives))
    return partial_auc_percent(labels, scores), 100 * sum(aps) / len(aps)


def bm25_scores(tmp_path: Path):
    """BM25 of each candidate, from an index of the corpus built here."""
    backend = EmbeddedBackend(tmp_path / "check-index", create=True)
    index_questions(backend, [question(q) for q in QUESTIONS])

    def score_of(qid, candidates):
        hits = {h.id: h.score for h in backend.search(question(qid).text, 99, only_ids=candidates)}
        assert set(hits) == set(candidates)
        return [hits[c] for c in candidates]

    return score_of


def evaluate_json(run, *args) -> list[dict]:
    result = run("--json", "evaluate", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


# -- Android --------------------------------------------------------------------------------


def test_android_bm25_auc_and_map_match_an_independent_computation(run, tmp_path):
    data = write_android(tmp_path / "android")
    auc, map_ = expected_figures(bm25_scores(tmp_path))
    assert 0 < auc < 100 and 0 < map_ < 100  # the fixture is neither perfect nor hopeless
    (bm25,) = evaluate_json(run, "--dataset", "android", "--data-dir", data, "--ranker", "bm25")
    assert bm25["metrics"][ev.AUC_COLUMN] == pytest.approx(auc)
    assert bm25["metrics"]["MAP"] == pytest.approx(map_)
    assert bm25["metrics"]["queries"] == 3  # d1 has no positive pair


def test_android_table_has_the_auc_column_and_default_rankers(run, tmp_path):
    data = write_android(tmp_path / "android", split="test")
    result = run("evaluate", "--dataset", "android", "--data-dir", data, "--split", "test")
    assert result.exit_code == 0, result.output
    assert "AUC(0.05)" in result.output
    rows = [line for line in result.output.splitlines() if "│" in line]
    assert [r.split("│")[1].strip() for r in rows] == ["bm25"]  # no given order here


def test_other_datasets_have_no_auc(run):
    fixture = FIXTURE.parent
    corpus = FIXTURE / "text_tokenized.txt"
    args = ("--dataset", "askubuntu", "--data-dir", fixture, "--corpus", corpus)
    (bm25,) = evaluate_json(run, *args, "--ranker", "bm25")
    assert ev.AUC_COLUMN not in bm25["metrics"]
    result = run("evaluate", *args, "--ranker", "bm25")
    assert "AUC" not in result.output


def one_line_error(result) -> str:
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_bad_pair_line_is_a_one_line_error_with_file_and_line(run, tmp_path):
    data = write_android(tmp_path / "android")
    (data / "dev.neg.txt").write_text("a1 b3\na1 f1 f2\n")
    line = one_line_error(run("evaluate", "--dataset", "android", "--data-dir", data))
    assert re.search(r"dev\.neg\.txt:2: expected 'query_id candidate_id'", line), line


def test_unknown_id_names_the_pair_file_and_line(run, tmp_path):
    data = write_android(tmp_path / "android")
    (data / "dev.pos.txt").write_text("a1 a2\nc1 zz9\n")
    line = one_line_error(run("evaluate", "--dataset", "android", "--data-dir", data))
    assert re.search(r"dev\.pos\.txt:2: question id 'zz9' is not in corpus\.tsv", line), line


def test_missing_android_corpus_is_a_clear_error(run, tmp_path):
    data = write_android(tmp_path / "android")
    (data / "corpus.tsv").unlink()
    line = one_line_error(run("evaluate", "--dataset", "android", "--data-dir", data))
    assert "no Android corpus" in line and "corpus.tsv.gz" in line


def test_android_has_no_given_order(run, tmp_path):
    data = write_android(tmp_path / "android")
    result = run("evaluate", "--dataset", "android", "--data-dir", data, "--ranker", "given-order")
    assert result.exit_code == 2 and "no given order" in result.output


# -- Accuracy@k -----------------------------------------------------------------------------


def test_accuracy_at_k_on_android_counts_the_hits_built_in(run, tmp_path, monkeypatch):
    data = write_android(tmp_path / "android")
    args = ("--dataset", "android", "--data-dir", data, "--ranker", "bm25")
    (bm25,) = evaluate_json(run, *args, "--accuracy-at", "1,2", "--accuracy-at", "3")
    for column, value in EXPECTED_ACCURACY.items():
        assert bm25["metrics"][column] == pytest.approx(value), column
    assert bm25["metrics"]["accuracy_queries"] == 3
    monkeypatch.setenv("COLUMNS", "160")  # a terminal wide enough for every column
    table = run("evaluate", *args, "--accuracy-at", "1,2,3").output
    assert all(c in table for c in EXPECTED_ACCURACY) and "33.3" in table and "66.7" in table


def write_askubuntu(root: Path) -> Path:
    """The same questions as AskUbuntu-format files. No candidate list holds c3, so a ranking
    of the candidates' index alone would put c2 first for c1."""
    (root / "askubuntu").mkdir(parents=True)
    (root / "corpus.txt").write_text(corpus_lines())
    rows = [
        ("a1", "a2", "a2 b3 f1"),
        ("b1", "b2", "b2 b3 f2"),
        ("c1", "c2", "c2 d2 f1"),
        ("d1", "", "d2 f1 f2"),
    ]
    (root / "askubuntu" / "dev.txt").write_text(
        "".join(f"{q}\t{rel}\t{cands}\t3 2 1\n" for q, rel, cands in rows)
    )
    return root


def test_accuracy_at_k_on_askubuntu_ranks_the_whole_corpus_file(run, tmp_path):
    data = write_askubuntu(tmp_path / "data")
    given, bm25 = evaluate_json(
        run,
        *("--dataset", "askubuntu", "--data-dir", data, "--corpus", data / "corpus.txt"),
        *("--ranker", "given-order", "--ranker", "bm25", "--accuracy-at", "1,2,3"),
    )
    for column, value in EXPECTED_ACCURACY.items():
        assert bm25["metrics"][column] == pytest.approx(value), column
        assert given["metrics"][column] is None  # given-order ranks only its candidates


def semeval_xml(queries) -> str:
    """SemEval-2016 subtask B XML: [(query id, text, [(related id, text, relevant)])]."""
    parts = ["<xml>"]
    for qid, (subject, body), related in queries:
        parts.append(f'<OrgQuestion ORGQ_ID="{qid}"><OrgQSubject>{escape(subject)}</OrgQSubject>')
        parts.append(f"<OrgQBody>{escape(body)}</OrgQBody><Thread>")
        for order, (rid, relevant) in enumerate(related, 1):
            label = "Relevant" if relevant else "Irrelevant"
            rel_subject, rel_body = QUESTIONS[rid]
            parts.append(
                f'<RelQuestion RELQ_ID="{qid}_{rid}" RELQ_RANKING_ORDER="{order}" '
                f'RELQ_RELEVANCE2ORGQ="{label}"><RelQSubject>{escape(rel_subject)}</RelQSubject>'
                f"<RelQBody>{escape(rel_body)}</RelQBody></RelQuestion>"
            )
        parts.append("</Thread></OrgQuestion>")
    return "".join(parts + ["</xml>"])


def test_accuracy_at_k_on_semeval_ranks_every_related_question(run, tmp_path):
    """Dev queries a1, b1, c1 over related questions spread across the train and dev files:
    the same hits as above (the queries themselves are not related questions here)."""
    base = tmp_path / "semeval2016-task3"
    base.mkdir()
    train = [("T1", QUESTIONS["d1"], [("c3", False), ("f2", False)])]
    dev = [
        ("A", QUESTIONS["a1"], [("a2", True), ("f1", False)]),
        ("B", QUESTIONS["b1"], [("b2", True), ("b3", False)]),
        ("C", QUESTIONS["c1"], [("c2", True), ("d2", False)]),
    ]
    (base / "SemEval2016-Task3-CQA-QL-train-part1.xml").write_text(semeval_xml(train))
    (base / "SemEval2016-Task3-CQA-QL-train-part2.xml").write_text(semeval_xml([]))
    (base / "SemEval2016-Task3-CQA-QL-dev.xml").write_text(semeval_xml(dev))
    (bm25,) = evaluate_json(
        run,
        *("--dataset", "semeval2016", "--data-dir", tmp_path, "--ranker", "bm25"),
        *("--accuracy-at", "1,2,3"),
    )
    for column, value in EXPECTED_ACCURACY.items():
        assert bm25["metrics"][column] == pytest.approx(value), column


def test_accuracy_at_rejects_a_bad_cutoff(run, tmp_path):
    data = write_android(tmp_path / "android")
    result = run("evaluate", "--dataset", "android", "--data-dir", data, "--accuracy-at", "1,0")
    assert result.exit_code == 2 and "'0' is not a whole number k >= 1" in result.output


# -- bow-cnn ranking logic, with a stand-in scorer ------------------------------------------


class OverlapScorer:
    """Stand-in for qres.encoders.bowcnn_scorer.BowCnnScorer: the Jaccard overlap of the questions'
    words."""

    def __init__(self):
        self.calls = 0

    def similarity(self, queries, candidates) -> np.ndarray:
        self.calls += 1
        words = [set(tokenize(q.text)) for q in candidates]
        return np.array(
            [
                [len(set(tokenize(q.text)) & w) / len(set(tokenize(q.text)) | w) for w in words]
                for q in queries
            ],
            dtype=np.float32,
        )


def test_bow_cnn_ranks_each_querys_candidates_by_the_scorer(tmp_path):
    data = write_android(tmp_path / "android")
    scorer = OverlapScorer()

    def score_of(qid, candidates):
        return list(scorer.similarity([question(qid)], [question(c) for c in candidates])[0])

    auc, map_ = expected_figures(score_of)
    evaluation = ev.evaluate(ev.load_benchmark("android", "dev", data), "bow-cnn", scorer=scorer)
    assert evaluation.metrics[ev.AUC_COLUMN] == pytest.approx(auc)
    assert evaluation.metrics["MAP"] == pytest.approx(map_)


def test_bow_cnn_top_k_in_chunks_equals_ranking_all_at_once():
    corpus = [question(q) for q in QUESTIONS]
    queries = [question("a1"), question("c1"), Question("new", "wifi grub menu", "")]
    scorer = OverlapScorer()
    chunked = BowCnnRanker(scorer, {}, lambda: corpus, chunk=5).top(queries, 4)
    assert scorer.calls == 3  # 12 questions in chunks of 5
    sims = scorer.similarity(queries, corpus)
    for query, row, got in zip(queries, sims, chunked, strict=True):
        ranked = [corpus[j].id for j in np.argsort(-row, kind="stable")]
        assert got == [qid for qid in ranked if qid != query.id][:4]
        assert query.id not in got


def test_bow_cnn_without_a_scorer_and_android_given_order_are_refused(tmp_path):
    data = write_android(tmp_path / "android")
    benchmark = ev.load_benchmark("android", "dev", data)
    with pytest.raises(Exception, match="bow-cnn ranker needs --model"):
        ev.evaluate(benchmark, "bow-cnn")
    with pytest.raises(ValueError, match="no given order"):
        ev.evaluate(benchmark, "given-order")


def test_bow_cnn_needs_a_bow_cnn_model(run, tmp_path):
    data = write_android(tmp_path / "android")
    result = run("evaluate", "--dataset", "android", "--data-dir", data, "--ranker", "bow-cnn")
    assert result.exit_code == 2 and "BOW-CNN export" in result.output


def test_unknown_pair_ids_raise_corpus_error(tmp_path):
    data = write_android(tmp_path / "android")
    (data / "dev.neg.txt").write_text("a1 b3\nnope a2\n")
    with pytest.raises(CorpusError, match=r"dev\.neg\.txt:2: question id 'nope'"):
        load_android(data, "dev")


# -- bow-cnn end to end ---------------------------------------------------------------------


def test_trained_bow_cnn_export_evaluates_on_android(run, tmp_path):
    from qres.encoders.bowcnn_scorer import BowCnnScorer
    from qres.training.bowcnn import train_bowcnn
    from qres.training.export import export_onnx
    from tests.training.helpers import tiny_config

    train_bowcnn(tiny_config(encoder="bowcnn", epochs=1), tmp_path / "run", show_progress=False)
    export_onnx(tmp_path / "run", tmp_path / "model")
    data = write_android(tmp_path / "android")
    scorer = BowCnnScorer.load(tmp_path / "model")

    def score_of(qid, candidates):
        return list(scorer.similarity([question(qid)], [question(c) for c in candidates])[0])

    auc, map_ = expected_figures(score_of)
    bm25, bowcnn = evaluate_json(
        run,
        *("--dataset", "android", "--data-dir", data, "--model", tmp_path / "model"),
        *("--accuracy-at", "1,3"),
    )
    assert (bm25["ranker"], bowcnn["ranker"]) == ("bm25", "bow-cnn")  # the BOW-CNN defaults
    assert bowcnn["metrics"][ev.AUC_COLUMN] == pytest.approx(auc)
    assert bowcnn["metrics"]["MAP"] == pytest.approx(map_)
    assert 0 <= bowcnn["metrics"]["Acc@1"] <= bowcnn["metrics"]["Acc@3"] <= 100


def test_an_empty_pair_file_is_named(tmp_path):
    data = write_android(tmp_path / "android", negatives=[])
    with pytest.raises(CorpusError, match=r"dev\.neg\.txt: no pairs"):
        load_android(data, "dev")
