import json
from pathlib import Path

import numpy as np
import pytest

from qres.backends.base import BackendError
from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import Question
from qres.evaluation.fusion_fit import tune_fusion
from qres.indexing.pipeline import index_questions
from qres.ranking.fusion import Fusion
from qres.ranking.search import SearchPipeline

from .fakes import TableEncoder

# "pendrive" and "usb" point the same way for the fake encoder; "printer" elsewhere.
ENCODER = TableEncoder({"usb": 0, "pendrive": 0, "stick": 0, "printer": 1, "cups": 1, "wifi": 2})
CORPUS = [
    # Shares the query's words but means something else: BM25 puts it first.
    Question("printer", "install printer driver ubuntu", "install ubuntu printer cups driver"),
    # Means the same with other words: only the dense side sees it.
    Question("pendrive", "install ubuntu from pendrive", "make a bootable pendrive"),
    Question("wifi", "wifi keeps dropping", "ubuntu wifi"),
]


@pytest.fixture
def backend(tmp_path):
    b = EmbeddedBackend(tmp_path / "ix", create=True)
    index_questions(b, CORPUS, encoder=ENCODER)
    yield b
    b.close()


def test_bm25_mode_is_the_first_stage(backend):
    results = SearchPipeline(backend).search("install ubuntu driver usb", 3, "bm25")
    assert results[0].id == "printer"
    assert all(r.cosine is None for r in results)


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_dense_similarity_overturns_bm25_order(backend, mode):
    bm25 = SearchPipeline(backend).search("install ubuntu usb", 3, "bm25")
    assert [r.id for r in bm25][:2] == ["printer", "pendrive"]
    results = SearchPipeline(backend, ENCODER).search("install ubuntu usb", 3, mode)
    assert results[0].id == "pendrive"
    by_id = {r.id: r for r in results}
    assert by_id["pendrive"].cosine > by_id["printer"].cosine
    assert by_id["pendrive"].bm25 < by_id["printer"].bm25


def test_hybrid_score_is_the_fusion_of_its_parts(backend):
    fusion = Fusion(bm25=0.3, cosine=2.0, bias=0.1)
    results = SearchPipeline(backend, ENCODER, fusion).search("install ubuntu usb", 3, "hybrid")
    top_bm25 = max(r.bm25 for r in results)
    for r in results:
        assert r.score == pytest.approx(0.3 * r.bm25 / top_bm25 + 2.0 * r.cosine + 0.1, rel=1e-5)


def test_query_is_encoded_once(backend):
    encoder = TableEncoder(ENCODER.directions)
    pipeline = SearchPipeline(backend, encoder)
    pipeline.search("install ubuntu usb", 3, "hybrid")
    assert encoder.calls == 1


def test_candidates_without_vectors_follow_in_bm25_order(backend):
    backend.upsert([Question("novec", "install ubuntu usb usb", "")])  # no vector
    backend.commit()
    results = SearchPipeline(backend, ENCODER).search("install ubuntu usb", 5, "hybrid")
    assert results[-1].id == "novec" and results[-1].cosine is None
    assert results[0].id == "pendrive"


def test_model_index_mismatch_is_a_clear_error(backend):
    other = TableEncoder(ENCODER.directions, fingerprint="another-model")
    with pytest.raises(BackendError, match="re-index"):
        SearchPipeline(backend, other)


def test_index_without_vectors_says_how_to_add_them(tmp_path):
    b = EmbeddedBackend(tmp_path / "plain", create=True)
    index_questions(b, CORPUS)
    with pytest.raises(BackendError, match="--model"):
        SearchPipeline(b, ENCODER)


def test_reindexing_with_another_model_is_refused(backend):
    other = TableEncoder(ENCODER.directions, fingerprint="another-model")
    with pytest.raises(BackendError, match="--rebuild"):
        index_questions(backend, CORPUS, encoder=other)


@pytest.mark.parametrize("query", ["", "the of and", "zzqx unknownword"])
def test_queries_without_matches_return_nothing(backend, query):
    assert SearchPipeline(backend, ENCODER).search(query, 5, "hybrid") == []


def test_tune_fusion_learns_to_trust_the_informative_signal():
    rng = np.random.default_rng(0)
    lists = []
    for _ in range(50):
        labels = rng.integers(0, 2, 10)
        cosine = labels * 0.6 + rng.normal(0, 0.1, 10)  # informative
        bm25 = rng.uniform(1, 10, 10)  # noise
        lists.append((bm25, cosine, labels))
    fusion = tune_fusion(lists, source="synthetic")
    assert fusion.cosine > 5 * abs(fusion.bm25)


def test_explain_at_80_columns_wraps_titles_between_words_and_names_the_model(run, monkeypatch):
    from qres.cli.group import stdout
    from qres.corpus.readers import read_corpus

    demo = Path(__file__).resolve().parents[1] / "qres" / "data" / "demo" / "questions.tsv"
    shipped = Path(__file__).resolve().parents[1] / "qres" / "models" / "default"
    monkeypatch.setattr(stdout, "width", 80)
    assert run("index", demo, "--model", shipped).exit_code == 0
    shown = run("search", "installing ubuntu from a usb drive on a lenovo laptop", "--explain")
    lines = shown.output.splitlines()
    assert all(len(line) <= 80 for line in lines), shown.output
    assert "cos gru" in shown.output and "default" not in shown.output
    words = set(shown.output.split())
    titles = {q.id: q.title for q in read_corpus(demo)}
    shown_ids = [
        line.split()[1] for line in lines[3:] if line.split() and line.split()[0].isdigit()
    ]
    assert len(shown_ids) == 10
    for qid in shown_ids:  # every word of every title is whole somewhere in the output
        assert all(w in words or w.endswith("…") for w in titles[qid].split()), titles[qid]
    as_json = json.loads(run("--json", "search", "usb boot", "-k", "2").output)
    assert as_json["models"] == ["gru"]
    assert all(set(r["cosines"]) == {"gru"} for r in as_json["results"])
    assert all(r["title"] and r["snippet"] for r in as_json["results"])
    assert all(r["answer_count"] is None and r["extras"] == {} for r in as_json["results"])


def test_the_table_shows_answer_counts_when_the_index_holds_any(run, tmp_path):
    counted, plain = tmp_path / "counted.tsv", tmp_path / "plain.tsv"
    counted.write_text(
        "id\ttitle\tbody\tanswer_count\n"
        "a\tboot from usb\tgrub hangs\t3\n"
        "b\tusb boot menu missing\tno menu at all\t\n"  # a question whose count is not known
    )
    plain.write_text("id\ttitle\tbody\na\tboot from usb\tgrub hangs\n")
    for corpus in (counted, plain):
        assert run("--index-dir", tmp_path / corpus.stem, "index", corpus).exit_code == 0

    shown = run("--index-dir", tmp_path / "counted", "search", "usb boot")
    assert shown.exit_code == 0, shown.output
    lines = [line.split() for line in shown.output.splitlines() if line.split()]
    assert ["#", "id", "score", "answers", "title"] in lines
    rows = {cells[1]: cells[3] for cells in lines if cells[0].isdigit()}
    assert rows == {"a": "3", "b": "-"}
    explained = run("--index-dir", tmp_path / "counted", "search", "usb boot", "--explain")
    lines = [line.split() for line in explained.output.splitlines() if line.split()]
    assert ["#", "id", "score", "bm25", "answers", "title"] in lines  # no cosine: BM25 only
    assert {cells[1]: cells[4:] for cells in lines if cells[0].isdigit()} == {
        "a": ["3", "boot", "from", "usb"],
        "b": ["-", "usb", "boot", "menu", "missing"],
    }
    without = run("--index-dir", tmp_path / "plain", "search", "usb boot")
    assert without.exit_code == 0 and "answers" not in without.output
    assert ["#", "id", "score", "title"] in [line.split() for line in without.output.splitlines()]


def test_a_ranking_made_as_it_is_read_reads_as_a_list():
    """A search that follows duplicate links ranks deeper than k but makes results only as
    they are read: sliced, indexed or iterated, the ranking is the list it stands for."""
    from qres.ranking.search import _Ranking

    made = []

    def make(positions):
        made.append(list(positions))
        return list(positions)

    ranking = _Ranking(make, 20)
    assert len(ranking) == 20 and ranking[:10] == list(range(10)) and made == [list(range(10))]
    assert ranking[3] == 3 and len(made) == 1  # already made: not again
    assert ranking.results([17, 12, 3]) == [17, 12, 3] and made[-1] == [17, 12]  # at once
    assert ranking[15] == 15 and ranking[-1] == 19 and ranking[10:30] == list(range(10, 20))
    assert list(ranking) == list(range(20)) and ranking[::-5] == [19, 14, 9, 4]
    with pytest.raises(IndexError):
        ranking[20]
    assert list(_Ranking(make, 0)) == []
