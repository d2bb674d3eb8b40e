"""The dense first stage: BM25's candidates joined by the questions nearest to the query
vector, rescored and fused alike."""

import pytest

from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import Question
from qres.indexing.pipeline import index_questions
from qres.ranking.search import SearchPipeline
from tests.fakes import TableEncoder

# "holiday" and "vacation" point the same way: a question worded with one is near a query
# worded with the other, though they share no term.
ENCODER = TableEncoder({"holiday": 0, "vacation": 0, "visa": 1, "passport": 2, "rail": 3})
QUESTIONS = [
    Question("q1", "Vacation ideas in winter", "somewhere warm please"),
    Question("q2", "Visa for a holiday in Japan", "tourist visa rules"),
    Question("q3", "Lost passport abroad", "what now"),
    Question("q4", "Rail pass for Europe", "is it worth it"),
]


@pytest.fixture
def index(tmp_path):
    backend = EmbeddedBackend(tmp_path / "ix", create=True)
    index_questions(backend, QUESTIONS, encoder=ENCODER)
    yield backend
    backend.close()


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_a_question_sharing_no_term_is_found_through_its_vector(index, mode):
    text = "holiday plans"  # "holiday" occurs in q2 only; q1 says "vacation"
    bm25_only = SearchPipeline(index, ENCODER, candidates=10, dense_candidates=0)
    assert "q1" not in [r.id for r in bm25_only.search(text, 10, mode)]
    union = SearchPipeline(index, ENCODER, candidates=10, dense_candidates=2)
    results = {r.id: r for r in union.search(text, 10, mode)}
    assert "q1" in results and results["q1"].bm25 == 0.0 and results["q1"].cosine > 0.9
    assert results["q2"].bm25 > 0  # BM25's own candidate keeps its score


def test_bm25_mode_and_given_candidate_lists_stay_bm25_only(index):
    union = SearchPipeline(index, ENCODER, candidates=10, dense_candidates=4)
    assert [r.id for r in union.search("holiday plans", 10, "bm25")] == ["q2"]
    reranked = union.search("holiday plans", 10, "hybrid", only_ids=["q2", "q3"])
    assert {r.id for r in reranked} == {"q2", "q3"}


def test_the_union_ranks_each_question_once(index):
    union = SearchPipeline(index, ENCODER, candidates=10, dense_candidates=10)
    ids = [r.id for r in union.search("holiday visa passport rail", 10, "hybrid")]
    assert sorted(ids) == ["q1", "q2", "q3", "q4"]
