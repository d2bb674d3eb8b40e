"""Several models on Elasticsearch (issue 15, item 4): a ``dense_vector`` field per model,
every cosine in the one search request, models added to the questions held. Checked on the
requests the real client sends (:class:`FakeCluster`, no server); the backend contract
(``contract.py``) runs the same behaviour on a cluster when ``QRES_ES_URL`` is set."""

from __future__ import annotations

import re

import numpy as np
import pytest

from qres.backends.base import Backend, BackendError, Candidates, Hit, IndexFormatError
from qres.backends.elasticsearch.requests import COSINE_SCRIPT, cosine_source
from qres.ranking.fusion import Fusion
from qres.ranking.search import SearchPipeline
from qres.text import bm25_terms

from ..fakes import TableEncoder
from .contract import QUESTIONS, vectors_for
from .test_elasticsearch_requests import FakeCluster, Request, bulk_lines, bulk_ok, mapping

FP_A, FP_B, FP_C = "a" * 64, "b" * 64, "c" * 64
FIELD_B = "vector_" + "b" * 16
MODEL_B = {"model_fingerprint": FP_B, "vector_dim": 3, "model_dir": "/models/b"}
META = {
    "model_fingerprint": FP_A,
    "vector_dim": 4,
    "model_dir": "/models/a",
    "more_models": [MODEL_B],
    "format": 3,
}


def two_model_mapping(with_fields: bool = True, meta: dict = META) -> dict:
    body = mapping(dims=4 if with_fields else None, meta=meta)
    if with_fields:
        properties = body["qres-questions-v1"]["mappings"]["properties"]
        properties[FIELD_B] = {"type": "dense_vector", "dims": 3}
    return body


def on_mapping(cluster: FakeCluster, body: dict) -> None:
    for index in ("qres-questions", "qres-questions-v1"):
        cluster.on("GET", f"/{index}/_mapping", body)


@pytest.fixture
def cluster():
    c = FakeCluster()
    on_mapping(c, two_model_mapping())
    c.on("PUT", "/qres-questions/_mapping", {"acknowledged": True})
    c.on("PUT", "/_bulk", bulk_ok)
    c.on("POST", "/qres-questions/_refresh", {"_shards": {"total": 1, "successful": 1}})
    return c


# -- writing -----------------------------------------------------------------------------------


def test_the_first_vectors_of_two_models_map_a_field_each_and_are_sent_together():
    c = FakeCluster()
    on_mapping(c, two_model_mapping(with_fields=False))  # models recorded, nothing written yet
    c.on("PUT", "/qres-questions/_mapping", {"acknowledged": True})
    c.on("PUT", "/_bulk", bulk_ok)
    backend = c.backend()
    vectors = {FP_A: vectors_for(2, dim=4), FP_B: vectors_for(2, dim=3, seed=1)}
    backend.upsert(QUESTIONS[:2], vectors)
    puts = c.sent("PUT", "/qres-questions/_mapping")
    assert puts[0].body == {
        "properties": {
            "vector": {"type": "dense_vector", "dims": 4, "index": True, "similarity": "cosine"},
            FIELD_B: {"type": "dense_vector", "dims": 3, "index": True, "similarity": "cosine"},
        }
    }
    (bulk,) = c.sent("PUT", "/_bulk")
    sources = [source for _, source in bulk_lines(bulk)]
    for field, fp in (("vector", FP_A), (FIELD_B, FP_B)):
        sent = np.array([source[field] for source in sources], np.float32)
        np.testing.assert_array_equal(sent, vectors[fp])
    assert sources[0]["title_terms"] == " ".join(bm25_terms(QUESTIONS[0].title))
    backend.upsert(QUESTIONS[2:3], {FP_B: vectors_for(1, 3), FP_A: vectors_for(1, 4)})
    assert len(c.sent("PUT", "/qres-questions/_mapping")) == 2  # fields known: no new mapping
    backend.close()


def test_every_model_of_the_index_needs_its_vectors(cluster):
    backend = cluster.backend()
    with pytest.raises(BackendError, match="holds vectors of 2 models: give each one's"):
        backend.upsert(QUESTIONS[:1], vectors_for(1))
    with pytest.raises(BackendError, match=f"also holds vectors of model {FP_B[:12]}"):
        backend.upsert(QUESTIONS[:1], {FP_A: vectors_for(1)})
    with pytest.raises(
        BackendError, match=f"5 dimensions but the index holds 3 for model {FP_B[:12]}"
    ):
        backend.upsert(QUESTIONS[:1], {FP_A: vectors_for(1), FP_B: vectors_for(1, dim=5)})
    with pytest.raises(BackendError, match=f"holds no vectors of model {FP_C[:12]}") as err:
        backend.upsert(QUESTIONS[:1], {FP_A: vectors_for(1), FP_B: vectors_for(1, 3), FP_C: [[1]]})
    assert "\n" not in str(err.value)
    assert cluster.sent("PUT", "/_bulk") == []  # nothing written
    backend.close()


# -- searching: every cosine in one request ------------------------------------------------------

# Fixture candidates: id, BM25 score, model A's vector, model B's vector (None: not stored).
CANDIDATES = [
    ("c1", 9.0, [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0]),
    ("c2", 7.5, [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0]),
    ("c3", 7.5, [0.0, 0.0, 1.0, 0.0], None),
    ("c4", 4.0, [0.6, 0.8, 0.0, 0.0], [0.6, 0.0, 0.8]),
    ("c5", 2.25, [0.0, 0.0, 0.0, 1.0], [0.0, 0.6, 0.8]),
    ("c6", 0.5, [0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 1.0]),
]
STORED = {"vector": 2, FIELD_B: 3}  # field -> position in a CANDIDATES row


def run_script(source: str, params: dict, row) -> float | None:
    """What cosine_source(field) computes for one hit, in Python (DenseVector's
    cosineSimilarity in double precision), null without a vector in that field."""
    (field,) = re.findall(r"field\('([^']+)'\)", source)
    assert source == cosine_source(field)
    stored = row[STORED[field]]
    if stored is None:
        return None
    query, stored = np.asarray(params["query_vector"], float), np.asarray(stored, float)
    return float(query @ stored / (np.linalg.norm(query) * np.linalg.norm(stored)))


def scripted_search(request: Request):
    hits = []
    for row in CANDIDATES[: request.body["size"]]:
        fields = {
            name: [run_script(entry["script"]["source"], entry["script"]["params"], row)]
            for name, entry in request.body["script_fields"].items()
        }
        hits.append({"_id": row[0], "_score": row[1], "fields": fields})
    return 200, {"hits": {"hits": hits}}


class TwoStepBackend(Backend):
    """The fixture candidates searched as the embedded backend does it: BM25 hits, then each
    model's stored vectors and their cosines in numpy (a hit has vectors if it has every
    model's)."""

    name = "memory"
    several_models = True

    def search(self, text, k, only_ids=None):
        return [Hit(row[0], row[1]) for row in CANDIDATES[:k]]

    def candidates(self, text, k, only_ids=None, query_vector=None):
        hits = self.search(text, k)
        cosines, has = {}, np.ones(len(hits), bool)
        for fp, query in query_vector.items():
            vectors, present = self.vectors([h.id for h in hits], model=fp)
            cosines[fp], has = vectors @ query, has & present
        return Candidates(hits, cosines[FP_A], has, cosines)

    def vectors(self, ids, model=None):
        column, dim = (2, 4) if model in (None, FP_A) else (3, 3)
        stored = {row[0]: row[column] for row in CANDIDATES}
        rows = np.array([stored[i] or [0.0] * dim for i in ids], np.float32)
        return rows, np.array([stored[i] is not None for i in ids])

    def metadata(self):
        return dict(META)

    upsert = delete = ids_not_in = commit = fetch = count = set_metadata = None


ENCODERS = (
    TableEncoder({"usb": 0, "wifi": 1, "nothing": 3}, dim=4, fingerprint=FP_A),
    TableEncoder({"usb": 2, "wifi": 0, "sound": 1}, dim=3, fingerprint=FP_B),
)
FUSION = Fusion(0.5, 0.5, params=[0.3, 0.45, 0.25], models=[FP_A, FP_B])


@pytest.fixture
def search_cluster(cluster):
    cluster.on("POST", "/qres-questions/_search", scripted_search)
    return cluster


def test_hybrid_over_two_models_is_one_search_with_a_script_field_per_model(search_cluster):
    pipeline = SearchPipeline(search_cluster.backend(), list(ENCODERS), FUSION, dense_candidates=0)
    pipeline.search("usb boot", 3, "hybrid", with_text=False)  # the ranking requests alone
    reads = [r for r in search_cluster.requests if not r.path.endswith("/_mapping")]
    (request,) = reads  # one search: no _mget of vectors, no request per model
    query_a, query_b = (e.encode_query("usb boot").tolist() for e in ENCODERS)
    assert request.body["size"] == 100
    assert request.body["script_fields"] == {
        "cosine": {"script": {"source": COSINE_SCRIPT, "params": {"query_vector": query_a}}},
        "cosine_" + "b" * 16: {
            "script": {"source": cosine_source(FIELD_B), "params": {"query_vector": query_b}}
        },
    }
    assert "field('vector_bbbbbbbbbbbbbbbb').get()" in cosine_source(FIELD_B)


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
@pytest.mark.parametrize("query", ["usb", "wifi usb", "sound nothing"])
def test_fused_ranking_over_two_models_equals_the_two_step_path(search_cluster, mode, query):
    """The cluster's per-model script cosines give the ranking, scores and per-model figures
    (--explain) of the embedded backend's path (vectors read, cosines in numpy)."""
    # BM25's candidates only: the request under test (the dense stage is tested apart)
    es = SearchPipeline(search_cluster.backend(), list(ENCODERS), FUSION, dense_candidates=0)
    es = es.search(query, 6, mode, with_text=False)
    reference = SearchPipeline(TwoStepBackend(), list(ENCODERS), FUSION)
    reference = reference.search(query, 6, mode, with_text=False)
    assert [r.id for r in es] == [r.id for r in reference]
    for got, want in zip(es, reference, strict=True):
        assert got.bm25 == want.bm25
        assert got.score == pytest.approx(want.score, abs=1e-6)
        assert (got.cosines is None) == (want.cosines is None)
        if want.cosines is not None:
            assert got.cosines == pytest.approx(want.cosines, abs=1e-6)
            assert got.cosine == pytest.approx(want.cosine, abs=1e-6)  # the mean, in dense
    assert es[-1].id == "c3" and es[-1].cosines is None  # lacks model B's vector: last


def test_a_query_vector_of_a_model_not_held_is_named_after_one_mapping_read(search_cluster):
    backend = search_cluster.backend()
    before = len(search_cluster.sent("GET", "/qres-questions(-v1)?/_mapping"))
    with pytest.raises(BackendError, match=f"holds no vectors of model {FP_C[:12]}") as err:
        backend.candidates("usb", 5, query_vector={FP_C: np.ones(4, np.float32) / 2})
    assert f"it holds {FP_A[:12]}, {FP_B[:12]}" in str(err.value)
    assert len(search_cluster.sent("GET", "/qres-questions(-v1)?/_mapping")) == before + 1
    assert search_cluster.sent("POST", "/qres-questions/_search") == []
    backend.close()


def test_a_model_another_process_added_is_found_by_rereading_the_mapping(cluster):
    c_meta = {**META, "more_models": [MODEL_B, {**MODEL_B, "model_fingerprint": FP_C}]}
    backend = cluster.backend()  # opened while the index held models A and B
    body = two_model_mapping(meta=c_meta)
    body["qres-questions-v1"]["mappings"]["properties"]["vector_" + "c" * 16] = {
        "type": "dense_vector",
        "dims": 3,
    }
    on_mapping(cluster, body)
    cluster.on("POST", "/qres-questions/_mget", {"docs": []})
    got, has = backend.vectors(["u1"], model=FP_C)
    (request,) = cluster.sent("POST", "/qres-questions/_mget")
    assert request.params["_source_includes"] == "vector_" + "c" * 16
    assert got.shape == (1, 3) and has.tolist() == [False]
    backend.close()


def test_vectors_of_a_further_model_are_read_from_its_field(cluster):
    def answer(request):
        docs = [{"_id": "u1", "found": True, "_source": {FIELD_B: [0.0, 0.6, 0.8]}}]
        return 200, {"docs": docs}

    cluster.on("POST", "/qres-questions/_mget", answer)
    backend = cluster.backend()
    got, has = backend.vectors(["u1"], model=FP_B)
    (request,) = cluster.sent("POST", "/qres-questions/_mget")
    assert request.params == {"_source_includes": FIELD_B, "realtime": "false"}
    np.testing.assert_array_equal(got, np.array([[0.0, 0.6, 0.8]], np.float32))
    assert has.tolist() == [True]
    backend.close()


def test_nearest_of_a_further_model_searches_its_field(cluster):
    cluster.on("POST", "/qres-questions/_search", {"hits": {"hits": [{"_id": "u2", "_score": 1}]}})
    backend = cluster.backend()
    hits = backend.nearest(np.array([0.0, 0.6, 0.8]), 1, model=FP_B)
    (request,) = cluster.sent("POST", "/qres-questions/_search")
    assert request.body["knn"]["field"] == FIELD_B
    assert [(h.id, h.score) for h in hits] == [("u2", 1.0)]
    backend.close()


def test_an_index_of_a_newer_format_is_refused():
    c = FakeCluster()
    on_mapping(c, two_model_mapping(meta={**META, "format": 4}))
    with pytest.raises(IndexFormatError, match="made by a newer qres \\(index format 4\\)"):
        c.backend()


# -- adding a model to the questions held ------------------------------------------------------

HELD = [  # (question, model A's vector) as the cluster holds them
    (QUESTIONS[0], [1.0, 0.0, 0.0, 0.0]),
    (QUESTIONS[1], [0.0, 1.0, 0.0, 0.0]),
    (QUESTIONS[2], [0.0, 0.0, 1.0, 0.0]),
]
HELD_EXTRAS = {"u2": {"answer_count": 2, "score": 5}}  # what a forum showed beside u2


def paged_search(request: Request):
    """Pages of two held questions, sorted by id, after ``search_after``."""
    after = (request.body.get("search_after") or [""])[0]
    rows = [(q, v) for q, v in HELD if q.id > after][:2]
    hits = [
        {
            "_id": q.id,
            "_source": {"title": q.title, "body": q.body, "tags": list(q.tags), "vector": v},
            "sort": [q.id],
        }
        for q, v in rows
    ]
    for hit in hits:
        if hit["_id"] in HELD_EXTRAS:
            hit["_source"]["extras"] = HELD_EXTRAS[hit["_id"]]
    return 200, {"hits": {"hits": hits}}


@pytest.fixture
def one_model_cluster(cluster):
    meta = {"model_fingerprint": FP_A, "vector_dim": 4, "model_dir": "/models/a", "format": 2}
    on_mapping(cluster, mapping(dims=4, meta=meta))
    cluster.on("POST", "/qres-questions/_search", paged_search)
    return cluster


def encode_b(questions):
    return {FP_B: np.array([[float(len(q.title)), 1.0, 0.0] for q in questions], np.float32)}


def test_adding_a_model_reindexes_the_questions_held_whole_then_records_it(one_model_cluster):
    c = one_model_cluster
    backend = c.backend()
    assert backend.add_models([MODEL_B], encode_b) == 3
    order = [(r.method, r.path) for r in c.requests]
    puts = c.sent("PUT", "/qres-questions/_mapping")
    assert puts[0].body == {
        "properties": {
            FIELD_B: {"type": "dense_vector", "dims": 3, "index": True, "similarity": "cosine"}
        }
    }
    searches = c.sent("POST", "/qres-questions/_search")
    assert [s.body.get("search_after") for s in searches] == [None, ["u2"], ["u3"]]
    assert searches[0].body == {
        "query": {"bool": {"filter": [{"exists": {"field": "vector"}}]}},
        "sort": [{"id": "asc"}],
        "size": 500,
        "_source": ["title", "body", "tags", "extras", "vector"],
        "track_total_hits": False,
    }
    sent = [pair for bulk in c.sent("PUT", "/_bulk") for pair in bulk_lines(bulk)]
    assert [action["index"]["_id"] for action, _ in sent] == ["u1", "u2", "u3"]
    for (question, vector), (_, source) in zip(HELD, sent, strict=True):
        assert source["title_terms"] == " ".join(bm25_terms(question.title))  # kept, not lost
        assert source["body_terms"] == " ".join(bm25_terms(question.body))
        assert source["tags"] == list(question.tags)
        assert source.get("extras") == HELD_EXTRAS.get(question.id)  # kept, not lost
        assert source["vector"] == vector  # copied, not recomputed
        assert source[FIELD_B] == encode_b([question])[FP_B][0].tolist()
    # the model is recorded last, once every vector is written and refreshed
    (meta_put,) = [p for p in puts if "_meta" in p.body]
    assert meta_put.body["_meta"]["more_models"] == [MODEL_B]
    assert meta_put.body["_meta"]["format"] == 3
    last_bulk = max(i for i, r in enumerate(c.requests) if r.path == "/_bulk")
    refresh = order.index(("POST", "/qres-questions/_refresh"))
    assert last_bulk < refresh < c.requests.index(meta_put)
    backend.close()


def test_an_interrupted_add_records_no_model(one_model_cluster):
    c = one_model_cluster
    backend = c.backend()
    calls = []

    def failing(questions):
        calls.append(len(questions))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return encode_b(questions)

    with pytest.raises(KeyboardInterrupt):
        backend.add_models([MODEL_B], failing)
    assert not [p for p in c.sent("PUT", "/qres-questions/_mapping") if "_meta" in p.body]
    assert backend.metadata().get("more_models") is None
    backend.close()


def test_a_model_held_already_is_refused(cluster):
    backend = cluster.backend()
    with pytest.raises(BackendError, match=f"holds model {FP_B[:12]} already"):
        backend.add_models([MODEL_B], encode_b)
    backend.close()


def test_index_questions_with_two_models_writes_both_on_elasticsearch(tmp_path):
    """qres index --backend elasticsearch --model A --model B: the models are recorded, then
    every question is sent with a vector of each (no longer refused)."""
    from qres.indexing.pipeline import index_questions

    c = FakeCluster()
    versions = {"indices": [{"name": "qres-questions-v1", "aliases": ["qres-questions"]}]}
    c.on("GET", "/_resolve/index/qres-questions-v\\*", versions)  # no killed rebuild's orphan
    alias = {"aliases": [{"name": "qres-questions", "indices": ["qres-questions-v1"]}]}
    c.on("GET", "/_resolve/index/qres-questions", alias)
    state = {"meta": {"format": 2, "analyzer": "english", "title_boost": 2.0}, "dims": {}}

    def get_mapping(request):
        body = mapping()
        mappings = body["qres-questions-v1"]["mappings"]
        mappings["_meta"] = dict(state["meta"])
        for field, dims in state["dims"].items():
            mappings["properties"][field] = {"type": "dense_vector", "dims": dims}
        return 200, body

    def put_mapping(request):
        state["meta"] = request.body.get("_meta", state["meta"])
        for field, value in request.body.get("properties", {}).items():
            state["dims"][field] = value["dims"]
        return 200, {"acknowledged": True}

    c.on("GET", "/qres-questions(-v1)?/_mapping", get_mapping)
    c.on("PUT", "/qres-questions/_mapping", put_mapping)
    c.on("PUT", "/_bulk", bulk_ok)
    c.on("POST", "/qres-questions/_refresh", {})
    c.on("GET", "/qres-questions/_count", {"count": 0})
    c.on("POST", "/qres-questions/_count", {"count": 0})  # an index to record models in: empty
    a = TableEncoder({"usb": 0}, dim=4, fingerprint=FP_A)
    b = TableEncoder({"usb": 1}, dim=3, fingerprint=FP_B)
    backend = c.backend()
    index_questions(backend, QUESTIONS, encoder=[a, b], workers=0)
    assert [m["model_fingerprint"] for m in state["meta"]["more_models"]] == [FP_B]
    assert state["meta"]["model_fingerprint"] == FP_A and state["meta"]["format"] == 3
    assert state["dims"] == {"vector": 4, FIELD_B: 3}
    sources = [s for bulk in c.sent("PUT", "/_bulk") for _, s in bulk_lines(bulk)]
    assert len(sources) == len(QUESTIONS)
    np.testing.assert_allclose([s[FIELD_B] for s in sources], b.encode_questions(QUESTIONS))
    np.testing.assert_allclose([s["vector"] for s in sources], a.encode_questions(QUESTIONS))
    backend.close()


def test_info_lists_every_vector_field_and_the_metadata_every_model(cluster):
    versions = {"indices": [{"name": "qres-questions-v1", "aliases": ["qres-questions"]}]}
    cluster.on("GET", "/_resolve/index/qres-questions-v\\*", versions)
    alias = {"aliases": [{"name": "qres-questions", "indices": ["qres-questions-v1"]}]}
    cluster.on("GET", "/_resolve/index/qres-questions", alias)
    cluster.on("POST", "/qres-questions/_count", {"count": 3})
    backend = cluster.backend()
    info = backend.describe()
    assert info["vector_fields"] == {"vector": 4, FIELD_B: 3}
    assert info["vector_dim"] == 4
    assert backend.metadata()["more_models"] == [MODEL_B]
    backend.close()


def test_ids_not_in_reads_every_id_held_in_pages_sorted_by_id(one_model_cluster):
    """Not a terms query of the ids given: a forum's would pass the cluster's 65,536 terms."""
    assert one_model_cluster.backend().ids_not_in({"u1", "u3", "u9"}) == ["u2"]
    searches = one_model_cluster.sent("POST", "/qres-questions/_search")
    assert [s.body.get("search_after") for s in searches] == [None, ["u2"], ["u3"]]
    assert searches[0].body == {
        "query": {"match_all": {}},
        "sort": [{"id": "asc"}],
        "size": 10_000,
        "_source": False,
        "track_total_hits": False,
    }
