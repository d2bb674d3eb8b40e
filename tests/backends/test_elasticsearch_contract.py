"""The backend contract on a real Elasticsearch cluster, the one ``QRES_ES_URL`` names.

Skipped (with the reason printed by ``-ra``) when ``QRES_ES_URL`` is unset, as in CI. Against
the docker-compose cluster::

    QRES_ES_URL=http://localhost:9200 QRES_ES_USER=elastic QRES_ES_PASSWORD=... \\
        pytest tests/backends

Every test works on its own uniquely named index (``qres-test-<run>-<name>``), deleted after.
"""

from __future__ import annotations

import os
import uuid

import pytest

from qres.backends.elasticsearch import EsBackend

from .contract import BackendContract

pytestmark = pytest.mark.skipif(
    not os.environ.get("QRES_ES_URL"),
    reason="QRES_ES_URL is not set: start a cluster (`docker compose up -d`) and export "
    "QRES_ES_URL, QRES_ES_USER and QRES_ES_PASSWORD to run the Elasticsearch contract suite",
)


@pytest.fixture
def make_backend():
    run = uuid.uuid4().hex[:12]
    names: list[str] = []

    def make(name: str, reopen: bool = False) -> EsBackend:
        index = f"qres-test-{run}-{name}"
        backend = EsBackend(index=index, create=not reopen)
        if not reopen:
            names.append(index)
        return backend

    yield make
    for index in names:
        with EsBackend(index=index) as backend:
            backend.drop()


class TestElasticsearchContract(BackendContract):
    pass


# -- same terms and scores as the embedded backend (tests/backends/test_analysis.py models it) --


@pytest.fixture(scope="module")
def semeval_questions(shared_data):
    from qres.corpus.readers import read_corpus

    path = shared_data / "semeval2016-task3" / "SemEval2016-Task3-CQA-QL-dev.xml"
    return list(read_corpus(path, "semeval-xml"))


def test_cluster_analyze_matches_bm25_terms(make_backend, semeval_questions):
    from qres.backends.elasticsearch.requests import terms_fields
    from qres.text import bm25_terms

    backend = make_backend("analyze")
    for question in semeval_questions[:300]:
        sent = terms_fields(question.title, question.body, "english")["body_terms"]
        answer = backend._client.indices.analyze(index=backend.alias, field="body_terms", text=sent)
        assert [t["token"] for t in answer["tokens"]] == bm25_terms(question.body)


def test_bm25_and_cosine_match_the_embedded_backend(make_backend, semeval_questions, tmp_path):
    """Same terms, so the same candidates in the same order; Lucene's BM25 differs from
    tantivy's by a constant factor (k1 + 1), which the fusion's division by the top score
    removes, so normalised scores are compared."""
    import numpy as np

    from qres.backends.embedded import EmbeddedBackend

    vectors = np.random.default_rng(0).normal(size=(len(semeval_questions), 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    es = make_backend("scores")
    embedded = EmbeddedBackend(tmp_path / "index", create=True, vector_dtype="float32")
    for backend in (es, embedded):
        backend.upsert(semeval_questions, vectors)
        backend.commit()
    query_vector = vectors[0]
    for question in semeval_questions[:50]:
        text = f"{question.title} {question.body}"
        got = es.search_with_cosine(text, 10, query_vector)
        want = embedded.search_with_cosine(text, 10, query_vector)
        es_top = {h.id: h.score / got[0][0].score for h in got[0]}
        emb_top = {h.id: h.score / want[0][0].score for h in want[0]}
        for qid in es_top.keys() & emb_top.keys():
            assert es_top[qid] == pytest.approx(emb_top[qid], abs=0.02), (question.id, qid)
        assert len(es_top.keys() & emb_top.keys()) >= 8, question.id
        cos_es = dict(zip([h.id for h in got[0]], got[1], strict=True))
        cos_emb = dict(zip([h.id for h in want[0]], want[1], strict=True))
        for qid in cos_es.keys() & cos_emb.keys():
            assert cos_es[qid] == pytest.approx(cos_emb[qid], abs=1e-5)
    embedded.close()


def test_two_models_rank_as_on_the_embedded_backend(make_backend, semeval_questions, tmp_path):
    """An index of two models built by qres index on the cluster and on the embedded backend:
    the hybrid over both cosines gives the same fused scores (BM25 divided by the top score,
    so Lucene's constant (k1 + 1) factor cancels) and the same per-model cosines."""
    from qres.backends.embedded import EmbeddedBackend
    from qres.encoders.runtime import Encoder
    from qres.indexing.pipeline import index_questions
    from qres.ranking.fusion import Fusion
    from qres.ranking.search import SearchPipeline
    from tests.safety_helpers import write_model

    a = Encoder.load(write_model(tmp_path / "a", dim=16, seed=0))
    b = Encoder.load(write_model(tmp_path / "b", dim=8, seed=1))
    questions = semeval_questions[:400]
    es = make_backend("models")
    embedded = EmbeddedBackend(tmp_path / "index", create=True, vector_dtype="float32")
    for backend in (es, embedded):
        index_questions(backend, questions, encoder=[a, b], workers=0)
    assert es.metadata()["more_models"][0]["model_fingerprint"] == b.fingerprint
    fusion = Fusion.equal([a.fingerprint, b.fingerprint])
    for question in questions[:40]:
        got = SearchPipeline(es, [a, b], fusion).search(question.title, 10, "hybrid")
        want = SearchPipeline(embedded, [a, b], fusion).search(question.title, 10, "hybrid")
        ours = {r.id: r for r in want}
        common = [r for r in got if r.id in ours]
        assert len(common) >= min(8, len(want)), question.id
        for r in common:
            assert r.score == pytest.approx(ours[r.id].score, abs=0.01), (question.id, r.id)
            assert r.cosines == pytest.approx(ours[r.id].cosines, abs=1e-5)
    embedded.close()
