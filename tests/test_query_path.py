"""The fast query path ranks exactly as the plain one: same ids, same scores, same order.

The plain path is written out here as it was before the query path read vector slots from
the fast field, ranked with numpy and read ids for the final k only: search the BM25 top
candidates (ids of all of them), look their vectors up by id, sort in Python.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import read_corpus
from qres.datasets.benchmarks import dataset_dir, load_semeval
from qres.encoders.runtime import Encoder
from qres.indexing.pipeline import index_questions
from qres.ranking import duplicates
from qres.ranking.fusion import Fusion, normalize_bm25
from qres.ranking.search import Result, SearchPipeline

REPO = Path(__file__).resolve().parents[1]
FUSION = Fusion(bm25=0.3, cosine=0.7)


def plain_search(backend, encoder, text, k, mode, candidates=100):
    hits = backend.search(text, max(k, candidates))
    if mode == "bm25" or not hits:
        return [Result(h.id, h.score, h.score, None) for h in hits[:k]]
    query = encoder.encode_query(text)
    ids = [h.id for h in hits]
    bm25 = np.array([h.score for h in hits], dtype=np.float32)
    vectors, has = backend.vectors(ids)
    cosine = vectors @ query
    score = cosine if mode == "dense" else FUSION.score(bm25, cosine)
    order = sorted(range(len(hits)), key=lambda i: (not has[i], -score[i] if has[i] else i))
    fallback = normalize_bm25(bm25)
    return [
        Result(
            ids[i],
            float(score[i]) if has[i] else float(fallback[i]),
            float(bm25[i]),
            float(cosine[i]) if has[i] else None,
        )
        for i in order[:k]
    ]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    encoder = Encoder.load(REPO / "qres" / "models" / "default")
    questions = list(read_corpus(REPO / "qres" / "data" / "demo" / "questions.tsv"))
    backend = EmbeddedBackend(tmp_path_factory.mktemp("demo") / "index", create=True)
    index_questions(backend, questions, encoder=encoder)
    # Some questions without a vector: they must follow the rescored ones in BM25 order.
    backend.upsert(questions[:20])
    backend.commit()
    yield backend, encoder, questions
    backend.close()


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_top_k_is_identical_to_the_plain_path(demo, shared_data, mode):
    backend, encoder, questions = demo
    dev = load_semeval(dataset_dir("semeval2016", shared_data), "dev")
    queries = [q.question.title for q in dev.queries]
    queries += [q.title for q in questions[:60]] + ["the of and", "zzz unknown"]
    # The reference ranks BM25's candidates alone (tests/test_dense_candidates.py: the union).
    pipeline = SearchPipeline(backend, encoder, FUSION, dense_candidates=0)
    compared = 0
    for text in queries:
        for k in (1, 5, 10, 100):
            expected = plain_search(backend, encoder, text, k, mode)
            assert pipeline.search(text, k, mode) == expected, (text, k)
            compared += len(expected)
    assert compared > 1000


def test_bm25_asks_the_engine_for_k_and_ids_are_read_for_the_final_k_only(demo, monkeypatch):
    backend, encoder, _ = demo
    asked, resolved = [], []
    real = EmbeddedBackend.candidates

    def spy(self, text, k, only_ids=None, query_vector=None):
        found = real(self, text, k, only_ids, query_vector)
        ids = found.ids
        found.ids = lambda rows: resolved.append(len(rows)) or ids(rows)
        asked.append(k)
        return found

    monkeypatch.setattr(EmbeddedBackend, "candidates", spy)
    # BM25's candidates alone; the union with the nearest questions reads all K ids to
    # leave out the ones both stages found (tests/test_dense_candidates.py).
    pipeline = SearchPipeline(backend, encoder, FUSION, dense_candidates=0)
    pipeline.follow_duplicates = False
    assert len(pipeline.search("install ubuntu from usb", 3, "bm25")) == 3
    assert len(pipeline.search("install ubuntu from usb", 3, "hybrid")) == 3
    assert asked == [3, 100]
    assert resolved == [3, 3]
    # Following closed duplicates to their originals lets the families of the first
    # VOTERS hits vote: their ids are read (no Result made), then the k shown made at once.
    asked.clear(), resolved.clear()
    pipeline.follow_duplicates = True
    assert len(pipeline.search("install ubuntu from usb", 3, "bm25")) == 3
    assert len(pipeline.search("install ubuntu from usb", 3, "hybrid")) == 3
    assert asked == [duplicates.VOTERS, 100]
    voters = [n for n in resolved if n != 3]
    assert resolved == [voters[0], 3, voters[1], 3] and 3 < min(voters) <= duplicates.VOTERS
