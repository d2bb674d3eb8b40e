"""Every request body the Elasticsearch backend sends, checked against the REST API's shape.

No server runs here: :class:`FakeCluster` is an ``elastic_transport`` node class that records
the HTTP requests the real client builds (path, query string, JSON or NDJSON body, headers)
and answers each with a canned response, so the client's own serialisation, product check,
retries and error mapping all run as they would against a cluster.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from elastic_transport import ApiResponseMeta, BaseNode, HttpHeaders

from qres.backends.base import Backend, BackendError, Hit
from qres.backends.elasticsearch import (
    CONFIG_DIR,
    COSINE_SCRIPT,
    DEFAULT_INDEX,
    DEFAULT_LOG_INDEX,
    RESCORE_SCRIPT,
    EsBackend,
    EsConfig,
    query_terms,
    search_log_document,
)
from qres.backends.elasticsearch.kibana import SAVED_OBJECTS, import_saved_objects
from qres.backends.elasticsearch.requests import cosine_field
from qres.corpus.readers import Question
from qres.ranking.fusion import Fusion
from qres.ranking.search import SearchPipeline
from qres.text import bm25_terms, words

from ..fakes import TableEncoder
from .contract import QUESTIONS, vectors_for

URL = "http://es.test:9200"
PASSWORD = "s3cret-Pa55"
REPO = Path(__file__).resolve().parents[2]

# -- the recording transport -------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    params: dict[str, str]
    body: object  # parsed JSON, a list of NDJSON lines, or None
    headers: dict[str, str]


class NodeAnswer(NamedTuple):  # the shape a node's perform_request returns
    meta: ApiResponseMeta
    body: bytes


class FakeCluster:
    """Canned answers by (method, path regex); later routes win. Records every request."""

    def __init__(self, version: str = "8.19.3"):
        self.requests: list[Request] = []
        self.routes: list[tuple[str, re.Pattern, object]] = []
        self.on("GET", "/", {"cluster_name": "qres", "version": {"number": version}})

    def on(self, method: str, path: str, answer=None, status: int = 200):
        """Answer ``method path`` with ``(status, answer)``; ``answer`` may be a callable
        ``(request) -> (status, body)`` or an exception to raise."""
        if not (callable(answer) or isinstance(answer, Exception)):
            answer = (status, answer)
        self.routes.append((method, re.compile(path), answer))
        return self

    def answer(self, request: Request):
        for method, pattern, answer in reversed(self.routes):
            if method == request.method and pattern.fullmatch(request.path):
                if isinstance(answer, Exception):
                    raise copy.copy(answer)  # a fresh one per attempt, as a real node raises
                return answer(request) if callable(answer) else answer
        raise AssertionError(f"unexpected request {request.method} {request.path}")

    def node_class(self, product_header: bool = True):
        cluster = self

        class RecordingNode(BaseNode):
            def perform_request(self, method, target, body=None, headers=None, **_):
                url = urlsplit(target)
                content_type = (headers or {}).get("content-type", "")
                if body is None:
                    parsed = None
                elif "ndjson" in content_type:
                    parsed = [json.loads(line) for line in body.decode().splitlines() if line]
                else:
                    parsed = json.loads(body)
                request = Request(
                    method,
                    url.path,
                    {k: v[-1] for k, v in parse_qs(url.query).items()},
                    parsed,
                    {**self._headers, **(headers or {})},
                )
                cluster.requests.append(request)
                status, answer = cluster.answer(request)
                answer_headers = {"content-type": "application/json"}
                if product_header:
                    answer_headers["x-elastic-product"] = "Elasticsearch"
                meta = ApiResponseMeta(
                    status=status,
                    http_version="1.1",
                    headers=HttpHeaders(answer_headers),
                    duration=0.0,
                    node=self.config,
                )
                return NodeAnswer(meta, b"" if answer is None else json.dumps(answer).encode())

        return RecordingNode

    def backend(self, config: EsConfig | None = None, **kwargs) -> EsBackend:
        config = config or EsConfig(url=URL, user="elastic", password=PASSWORD)
        return EsBackend(config=config, node_class=self.node_class(), **kwargs)

    def sent(self, method: str, path: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and re.fullmatch(path, r.path)]


def es_error(status: int, kind: str, reason: str) -> dict:
    error = {"type": kind, "reason": reason}
    return {"error": {"root_cause": [error], **error}, "status": status}


def mapping(
    physical="qres-questions-v1", dims=None, meta=None, extras=True, title_words=True
) -> dict:
    properties = {
        "id": {"type": "keyword"},
        "title": {"type": "text", "index": False},
        "body": {"type": "text", "index": False},
        "title_terms": {"type": "text", "analyzer": "qres_terms"},
        "body_terms": {"type": "text", "analyzer": "qres_terms"},
        "tags": {"type": "keyword"},
    }
    if title_words:  # an index made before the template had it has no title_words field
        properties["title_words"] = {"type": "keyword"}
    if extras:  # an index made before the template had it has no extras field
        properties["extras"] = {"type": "object", "enabled": False}
    if dims:
        properties["vector"] = {"type": "dense_vector", "dims": dims}
    meta = {"format": 2, "analyzer": "english", "title_boost": 2.0, **(meta or {})}
    return {physical: {"mappings": {"_meta": meta, "properties": properties}}}


def bulk_ok(request: Request):
    """A bulk answer marking every action of the request as done (unknown ids: not found)."""
    items = []
    for action, _ in bulk_lines(request):
        ((op, meta),) = action.items()
        status = 404 if op == "delete" and meta["_id"].startswith("missing") else 200
        result = "not_found" if status == 404 else "updated"
        items.append({op: {"_id": meta["_id"], "status": status, "result": result}})
    return 200, {"took": 1, "errors": False, "items": items}


def bulk_lines(request: Request) -> list[tuple[dict, dict | None]]:
    """(action line, source line or None) pairs of an NDJSON bulk body."""
    pairs, lines = [], list(request.body)
    while lines:
        action = lines.pop(0)
        source = lines.pop(0) if "delete" not in action else None
        pairs.append((action, source))
    return pairs


@pytest.fixture
def cluster():
    """A cluster holding the qres-questions alias over qres-questions-v1 (no vectors yet)."""
    c = FakeCluster()
    c.on("GET", "/qres-questions/_mapping", mapping())
    c.on("GET", "/qres-questions-v1/_mapping", mapping())
    c.on("PUT", "/qres-questions/_mapping", {"acknowledged": True})
    c.on("PUT", "/_bulk", bulk_ok)
    c.on("POST", "/qres-questions/_refresh", {"_shards": {"total": 1, "successful": 1}})
    return c


# -- creating the index ------------------------------------------------------------------------


def missing(c: FakeCluster, index: str = "qres-questions") -> None:
    not_found = es_error(404, "index_not_found_exception", "no such index")
    c.on("GET", f"/{index}/_mapping", not_found, status=404)


def test_create_sends_the_template_settings_mappings_and_alias():
    c = FakeCluster()
    missing(c)
    c.on("GET", "/_resolve/index/qres-questions-v\\*", {"indices": [], "aliases": []})
    c.on("PUT", "/qres-questions-v1", {"acknowledged": True, "index": "qres-questions-v1"})
    backend = c.backend(create=True)

    (create,) = c.sent("PUT", "/qres-questions-v1")
    assert set(create.body) == {"settings", "mappings", "aliases"}
    assert create.body["aliases"] == {"qres-questions": {}}
    index = create.body["settings"]["index"]
    assert index["number_of_shards"] == 1
    assert index["auto_expand_replicas"] == "0-1"  # 0 replicas on one node, 1 on more
    assert index["refresh_interval"] == "-1"  # only commit() makes writes visible
    assert index["similarity"]["qres_bm25"] == {"type": "BM25", "k1": 1.2, "b": 0.75}
    # Elasticsearch only splits the terms qres.text computed (tests/backends/test_analysis.py)
    assert index["analysis"] == {
        "tokenizer": {"qres_terms": {"type": "whitespace", "max_token_length": 1024}},
        "analyzer": {"qres_terms": {"type": "custom", "tokenizer": "qres_terms", "filter": []}},
    }
    mappings = create.body["mappings"]
    assert mappings["dynamic"] == "strict"
    assert mappings["_source"] == {"excludes": ["title_terms", "body_terms", "title_words"]}
    assert mappings["properties"] == {
        "id": {"type": "keyword"},
        "title": {"type": "text", "index": False},
        "body": {"type": "text", "index": False},
        "title_terms": {"type": "text", "analyzer": "qres_terms", "similarity": "qres_bm25"},
        "body_terms": {"type": "text", "analyzer": "qres_terms", "similarity": "qres_bm25"},
        "title_words": {"type": "keyword"},  # each title's words as typed: Backend.title_words
        "tags": {"type": "keyword"},
        "extras": {"type": "object", "enabled": False},  # kept in _source, never indexed
    }
    assert mappings["_meta"] == {
        "format": 2,
        "backend": "elasticsearch",
        "analyzer": "english",
        "title_boost": 2.0,
    }
    assert "mapping" not in index  # 8.x keeps vectors in _source anyway
    assert backend._target == "qres-questions"  # reads and writes name the alias
    backend.close()


def test_create_on_9_2_keeps_vectors_in_source():
    c = FakeCluster(version="9.2.1")
    missing(c)
    c.on("GET", "/_resolve/index/qres-questions-v\\*", {"indices": [], "aliases": []})
    c.on("PUT", "/qres-questions-v1", {"acknowledged": True})
    c.backend(create=True).close()
    (create,) = c.sent("PUT", "/qres-questions-v1")
    assert create.body["settings"]["index"]["mapping"] == {"exclude_source_vectors": False}


def test_create_with_settings_adds_vector_field_shards_replicas_and_plain_analyzer():
    c = FakeCluster()
    missing(c, "qres-big")
    c.on("GET", "/_resolve/index/qres-big-v\\*", {"indices": [{"name": "qres-big-v7"}]})
    c.on("PUT", "/qres-big-v8", {"acknowledged": True})
    c.backend(
        index="qres-big",
        create=True,
        vector_dims=384,
        shards=3,
        replicas=2,
        title_boost=3.5,
        analyzer="plain",
    ).close()

    (create,) = c.sent("PUT", "/qres-big-v8")  # the next free version number
    index = create.body["settings"]["index"]
    assert (index["number_of_shards"], index["number_of_replicas"]) == (3, 2)
    assert index["auto_expand_replicas"] == "false"  # else it would override number_of_replicas
    properties = create.body["mappings"]["properties"]
    assert properties["vector"] == {
        "type": "dense_vector",
        "dims": 384,
        "index": True,
        "similarity": "cosine",
    }
    assert properties["title_terms"]["analyzer"] == "qres_terms"  # plain: qres sends other terms
    meta = create.body["mappings"]["_meta"]
    assert meta["vector_dim"] == 384 and meta["title_boost"] == 3.5 and meta["analyzer"] == "plain"


def test_opening_reads_the_mapping_once_and_sends_credentials(cluster):
    backend = cluster.backend()
    (request,) = cluster.requests
    assert (request.method, request.path) == ("GET", "/qres-questions/_mapping")
    assert request.headers["authorization"].startswith("Basic ")
    assert "compatible-with=8" in request.headers["accept"]  # REST compatibility for 9.x
    backend.close()


def test_api_key_is_sent_instead_of_basic_auth(cluster):
    cluster.backend(EsConfig(url=URL, api_key="a2V5OnNlY3JldA==")).close()
    assert cluster.requests[0].headers["authorization"] == "ApiKey a2V5OnNlY3JldA=="


# -- writing -----------------------------------------------------------------------------------


def test_upsert_sends_bulk_index_actions_with_sources(cluster):
    backend = cluster.backend()
    backend.upsert(QUESTIONS[:2])
    (bulk,) = cluster.sent("PUT", "/_bulk")
    assert bulk.headers["content-type"].startswith("application/vnd.elasticsearch+x-ndjson")
    assert bulk_lines(bulk) == [
        (
            {"index": {"_index": "qres-questions", "_id": "u1"}},
            {
                "id": "u1",
                "title": QUESTIONS[0].title,
                "body": QUESTIONS[0].body,
                "title_terms": " ".join(bm25_terms(QUESTIONS[0].title)),
                "body_terms": " ".join(bm25_terms(QUESTIONS[0].body)),
                "tags": ["boot", "usb"],
                "title_words": words(QUESTIONS[0].title),
            },
        ),
        (
            {"index": {"_index": "qres-questions", "_id": "u2"}},
            {
                "id": "u2",
                "title": QUESTIONS[1].title,
                "body": QUESTIONS[1].body,
                "title_terms": " ".join(bm25_terms(QUESTIONS[1].title)),
                "body_terms": " ".join(bm25_terms(QUESTIONS[1].body)),
                "tags": ["wifi"],
                "title_words": words(QUESTIONS[1].title),
            },
        ),
    ]
    backend.close()


def test_a_title_s_words_are_sent_as_typed_and_counted_by_a_terms_aggregation(cluster):
    backend = cluster.backend()
    assert backend.completes_first_words
    backend.upsert([Question("x1", "Wi-Fi drops: Wi-Fi card", "body")])
    (bulk,) = cluster.sent("PUT", "/_bulk")
    assert bulk_lines(bulk)[0][1]["title_words"] == ["wi-fi", "drops", "card"]
    buckets = [{"key": "wi-fi", "doc_count": 7}, {"key": "wifi", "doc_count": 2}]
    cluster.on("POST", "/qres-questions/_search", {"aggregations": {"words": {"buckets": buckets}}})
    assert backend.title_words("wi", 2) == [("wi-fi", 7), ("wifi", 2)]
    assert backend.title_words("wi-f", 5) == [("wi-fi", 7), ("wifi", 2)]  # as answered
    first, second = cluster.sent("POST", "/qres-questions/_search")
    assert first.body == {
        "size": 0,
        "track_total_hits": False,
        "query": {"prefix": {"title_words": "wi"}},
        "aggs": {"words": {"terms": {"field": "title_words", "size": 2, "include": "wi.*"}}},
    }
    # the typed word's characters are taken literally in the aggregation's regular expression
    assert second.body["aggs"]["words"]["terms"]["include"] == "wi\\-f.*"
    backend.close()


def test_an_index_without_title_words_completes_no_first_word_and_is_sent_none():
    c = FakeCluster()
    c.on("GET", "/qres-questions/_mapping", mapping(title_words=False))
    c.on("PUT", "/_bulk", bulk_ok)
    backend = c.backend()
    backend.upsert(QUESTIONS[:1])
    (bulk,) = c.sent("PUT", "/_bulk")
    assert "title_words" not in bulk_lines(bulk)[0][1]  # dynamic: strict would refuse it
    assert backend.title_words("boo", 3) == []
    assert c.sent("POST", "/qres-questions/_search") == []
    assert not backend.completes_first_words  # what qres info says
    backend.close()


EXTRAS = {"score": 12, "answer_count": 3, "accepted_answer_id": "7"}


def test_extras_are_sent_in_the_source_of_questions_that_have_them(cluster):
    backend = cluster.backend()
    backend.upsert([Question("x1", "Visa on arrival", "at the airport", (), EXTRAS), QUESTIONS[0]])
    (bulk,) = cluster.sent("PUT", "/_bulk")
    (_, first), (_, second) = bulk_lines(bulk)
    assert first["extras"] == EXTRAS
    assert "extras" not in second  # none: the document has no extras field
    assert cluster.sent("PUT", "/qres-questions/_mapping") == []  # the mapping has the field
    backend.close()


def old_index_cluster() -> FakeCluster:
    """An index made before the template had the extras field (dynamic: strict refuses an
    unmapped field, so a write with extras must map it first)."""
    c = FakeCluster()
    c.on("GET", "/qres-questions/_mapping", mapping(extras=False))
    c.on("PUT", "/qres-questions/_mapping", {"acknowledged": True})
    c.on("PUT", "/_bulk", bulk_ok)
    return c


def test_an_index_without_the_extras_field_gets_it_mapped_by_the_first_write_with_extras():
    c = old_index_cluster()
    backend = c.backend()
    backend.upsert(QUESTIONS[:2])  # no extras: nothing to map
    assert c.sent("PUT", "/qres-questions/_mapping") == []
    backend.upsert([Question("x1", "Visa on arrival", "at the airport", (), EXTRAS)])
    (put,) = c.sent("PUT", "/qres-questions/_mapping")
    assert put.body == {"properties": {"extras": {"type": "object", "enabled": False}}}
    order = [(r.method, r.path) for r in c.requests]
    assert order.index(("PUT", "/qres-questions/_mapping")) < len(order) - 1  # before the bulk
    assert order[-1] == ("PUT", "/_bulk")
    backend.upsert([Question("x2", "Visa", "again", (), EXTRAS)])  # mapped now: no new PUT
    assert len(c.sent("PUT", "/qres-questions/_mapping")) == 1
    backend.close()


def test_an_index_without_the_extras_field_is_read_with_empty_extras():
    c = old_index_cluster()
    c.on("POST", "/qres-questions/_mget", mget_answer)
    backend = c.backend()
    got = backend.fetch(["u1"])
    assert got["u1"].extras == {} and got["u1"].title == "title u1"
    backend.close()


def test_first_vectors_add_the_vector_mapping_then_index_them(cluster):
    backend = cluster.backend()
    vectors = vectors_for(2, dim=4)
    backend.upsert(QUESTIONS[:2], vectors)

    puts = cluster.sent("PUT", "/qres-questions/_mapping")
    assert puts[0].body == {
        "properties": {
            "vector": {"type": "dense_vector", "dims": 4, "index": True, "similarity": "cosine"}
        }
    }
    assert puts[1].body == {  # _meta merged, not replaced
        "_meta": {"format": 2, "analyzer": "english", "title_boost": 2.0, "vector_dim": 4}
    }
    order = [(r.method, r.path) for r in cluster.requests]
    assert order.index(("PUT", "/qres-questions/_mapping")) < order.index(("PUT", "/_bulk"))
    (bulk,) = cluster.sent("PUT", "/_bulk")
    sent = np.array([source["vector"] for _, source in bulk_lines(bulk)], np.float32)
    np.testing.assert_array_equal(sent, vectors)
    backend.upsert(QUESTIONS[2:3], vectors_for(1, dim=4))  # mapping is known now: no new PUT
    assert len(cluster.sent("PUT", "/qres-questions/_mapping")) == 2
    backend.close()


def test_upsert_is_sent_in_batches(cluster):
    backend = cluster.backend()
    backend.bulk_docs = 2
    backend.upsert(QUESTIONS)
    assert [len(bulk_lines(b)) for b in cluster.sent("PUT", "/_bulk")] == [2, 2, 1]
    backend.close()


def test_rejected_documents_are_retried_alone_with_backoff(cluster):
    attempts = []

    def reject_u2_once(request):
        attempts.append([action["index"]["_id"] for action, _ in bulk_lines(request)])
        items = []
        for action, _ in bulk_lines(request):
            qid = action["index"]["_id"]
            if qid == "u2" and len(attempts) == 1:
                err = {"type": "es_rejected_execution_exception", "reason": "queue full"}
                items.append({"index": {"_id": qid, "status": 429, "error": err}})
            else:
                items.append({"index": {"_id": qid, "status": 201, "result": "created"}})
        return 200, {"errors": True, "items": items}

    cluster.on("PUT", "/_bulk", reject_u2_once)
    backend = cluster.backend()
    backend.bulk_initial_backoff = 0.0
    backend.upsert(QUESTIONS[:3])
    assert attempts == [["u1", "u2", "u3"], ["u2"]]
    backend.close()


def test_unavailable_cluster_answers_are_retried(cluster):
    answers = iter([(503, es_error(503, "unavailable", "busy"))] * 4 + [None])

    def flaky(request):
        answer = next(answers)
        return answer if answer else bulk_ok(request)

    cluster.on("PUT", "/_bulk", flaky)
    backend = cluster.backend()
    backend.bulk_initial_backoff = 0.0
    backend.upsert(QUESTIONS[:2])  # no error: the fifth attempt succeeds
    assert len(cluster.sent("PUT", "/_bulk")) == 5
    backend.close()


def test_failed_documents_are_listed_with_reasons(cluster):
    def two_bad(request):
        items = []
        for action, _ in bulk_lines(request):
            qid = action["index"]["_id"]
            if qid in ("u2", "u4"):
                err = {
                    "type": "document_parsing_exception",
                    "reason": "[1:20] failed to parse field [vector]",
                    "caused_by": {"type": "illegal_argument_exception", "reason": "zero magnitude"},
                }
                items.append({"index": {"_id": qid, "status": 400, "error": err}})
            else:
                items.append({"index": {"_id": qid, "status": 201}})
        return 200, {"errors": True, "items": items}

    cluster.on("PUT", "/_bulk", two_bad)
    backend = cluster.backend()
    with pytest.raises(BackendError) as caught:
        backend.upsert(QUESTIONS)
    message = str(caught.value)
    assert message.startswith("2 of 5 questions were not indexed in qres-questions at " + URL)
    assert "u2 (document_parsing_exception: [1:20] failed to parse field [vector] (zero " in message
    assert "u4 (" in message and "u1" not in message and "\n" not in message
    backend.close()


def test_refusals_before_a_lost_connection_are_reported_with_it(cluster):
    from elastic_transport import ConnectionError as Unreachable

    sent = []

    def refuse_u2_then_vanish(request):
        sent.append(request)
        if len(sent) > 1:
            raise Unreachable("connection refused")
        err = {"type": "mapper_parsing_exception", "reason": "bad"}
        items = [
            {"index": {"_id": qid, "status": 400, "error": err}}
            if qid == "u2"
            else {"index": {"_id": qid, "status": 201}}
            for qid in (a["index"]["_id"] for a, _ in bulk_lines(request))
        ]
        return 200, {"errors": True, "items": items}

    cluster.on("PUT", "/_bulk", refuse_u2_then_vanish)
    backend = cluster.backend()
    backend.bulk_docs = 2
    with pytest.raises(BackendError) as caught:
        backend.upsert(QUESTIONS)
    message = str(caught.value)
    assert message.startswith(f"cannot reach Elasticsearch at {URL}")
    assert "; before that, 1 of 5 questions were not indexed in qres-questions" in message
    assert "u2 (mapper_parsing_exception: bad)" in message and "\n" not in message
    backend.close()


def test_many_failures_show_the_first_five_and_a_count(cluster):
    def all_bad(request):
        err = {"type": "mapper_parsing_exception", "reason": "bad"}
        items = [
            {"index": {"_id": a["index"]["_id"], "status": 400, "error": err}}
            for a, _ in bulk_lines(request)
        ]
        return 200, {"errors": True, "items": items}

    cluster.on("PUT", "/_bulk", all_bad)
    backend = cluster.backend()
    questions = [Question(f"q{i}", "t", "b") for i in range(8)]
    with pytest.raises(BackendError, match=r"^8 of 8 questions .*q4 \(.*; and 3 more: fix"):
        backend.upsert(questions)
    backend.close()


def test_delete_sends_bulk_delete_actions_and_ignores_unknown_ids(cluster):
    backend = cluster.backend()
    backend.delete(["u1", "missing-id"])
    (bulk,) = cluster.sent("PUT", "/_bulk")
    assert bulk_lines(bulk) == [
        ({"delete": {"_index": "qres-questions", "_id": "u1"}}, None),
        ({"delete": {"_index": "qres-questions", "_id": "missing-id"}}, None),
    ]
    backend.close()


def test_commit_refreshes_the_alias(cluster):
    backend = cluster.backend()
    backend.commit()
    assert len(cluster.sent("POST", "/qres-questions/_refresh")) == 1
    backend.close()


# -- searching ---------------------------------------------------------------------------------


def search_answer(*hits):
    return {"hits": {"hits": [{"_id": i, "_score": s} for i, s in hits]}}


def test_search_sends_most_fields_multi_match_with_title_boost(cluster):
    cluster.on("POST", "/qres-questions/_search", search_answer(("u1", 3.5), ("u3", 1.25)))
    backend = cluster.backend()
    hits = backend.search("How do I boot Ubuntu from a USB stick?", 10)
    (request,) = cluster.sent("POST", "/qres-questions/_search")
    assert request.body == {
        "query": {
            "multi_match": {
                "query": "how do i boot ubuntu from usb stick",
                "type": "most_fields",
                "fields": ["title_terms^2.0", "body_terms"],
            }
        },
        "size": 10,
        "_source": False,
        "track_total_hits": False,
    }
    assert [(h.id, h.score) for h in hits] == [("u1", 3.5), ("u3", 1.25)]
    backend.close()


@pytest.mark.parametrize(
    ("text", "sent"),
    [
        ("title:(usb OR x)", "titl usb x"),
        ('"usb^10 AND NOT boot*', "usb 10 boot"),
        ("usb usb USB booting boots", "usb boot"),  # each distinct term once
        ("can't you're John's e-mail", "can t you re john e mail"),  # as the embedded backend
    ],
)
def test_query_syntax_is_sent_as_plain_terms(cluster, text, sent):
    cluster.on("POST", "/qres-questions/_search", search_answer())
    backend = cluster.backend()
    backend.search(text, 5)
    (request,) = cluster.sent("POST", "/qres-questions/_search")
    assert request.body["query"]["multi_match"]["query"] == sent
    assert "query_string" not in json.dumps(request.body)
    backend.close()


def test_long_queries_are_capped_at_1024_distinct_terms():
    terms = query_terms(" ".join(f"w{i}" for i in range(3000)))
    assert len(terms) == 1024 and terms[0] == "w0"


def test_title_boost_comes_from_the_index_metadata():
    c = FakeCluster()
    c.on("GET", "/qres-questions/_mapping", mapping(meta={"title_boost": 3.5}))
    c.on("POST", "/qres-questions/_search", search_answer())
    c.backend(title_boost=9.0).search("usb", 3)  # settings only shape a new index
    assert c.sent("POST", "/qres-questions/_search")[0].body["query"]["multi_match"]["fields"] == [
        "title_terms^3.5",
        "body_terms",
    ]


def test_only_ids_filters_by_id_and_keeps_non_matching_at_zero(cluster):
    cluster.on("POST", "/qres-questions/_search", search_answer(("u1", 2.0), ("u4", 0.0)))
    backend = cluster.backend()
    hits = backend.search("usb boot", 10, only_ids=["u1", "u4", "zz"])
    (request,) = cluster.sent("POST", "/qres-questions/_search")
    assert request.body["query"] == {
        "bool": {
            "filter": [{"ids": {"values": ["u1", "u4", "zz"]}}],
            "should": [
                {
                    "multi_match": {
                        "query": "usb boot",
                        "type": "most_fields",
                        "fields": ["title_terms^2.0", "body_terms"],
                    }
                }
            ],
        }
    }
    assert hits[1].score == 0.0
    backend.search("the of", 10, only_ids=["u1"])  # no terms: the ids alone, all at 0
    assert cluster.requests[-1].body["query"] == {"bool": {"filter": [{"ids": {"values": ["u1"]}}]}}
    backend.close()


def test_searches_that_cannot_match_send_nothing(cluster):
    backend = cluster.backend()
    before = len(cluster.requests)
    assert backend.search("the of and", 5) == []
    assert backend.search("", 5) == []
    assert backend.search("usb", 0) == []
    assert len(cluster.requests) == before
    backend.close()


def test_k_is_capped_at_the_result_window(cluster):
    cluster.on("POST", "/qres-questions/_search", search_answer())
    backend = cluster.backend()
    backend.search("usb", 50_000)
    assert cluster.sent("POST", "/qres-questions/_search")[0].body["size"] == 10_000
    backend.close()


@pytest.fixture
def vector_cluster(cluster):
    cluster.on("GET", "/qres-questions/_mapping", mapping(dims=4, meta={"vector_dim": 4}))
    cluster.on("POST", "/qres-questions/_search", search_answer(("u1", 4.0)))
    return cluster


# -- dense and hybrid in one request ------------------------------------------------------------

# Fixture candidates: id, BM25 score, stored vector (None: the question has no vector).
CANDIDATES = [
    ("c1", 9.0, [1.0, 0.0, 0.0, 0.0]),
    ("c2", 7.5, [0.0, 1.0, 0.0, 0.0]),
    ("c3", 7.5, None),
    ("c4", 4.0, [0.6, 0.8, 0.0, 0.0]),
    ("c5", 2.25, [0.0, 0.0, 0.0, 1.0]),
    ("c6", 0.5, [0.5, 0.5, 0.5, 0.5]),
]


def cosine_script(source: str, params: dict, vector) -> float | None:
    """What COSINE_SCRIPT computes for one hit, in Python: DenseVector.cosineSimilarity (the
    dot product over both magnitudes, in double precision), null without a vector."""
    assert source == COSINE_SCRIPT
    if vector is None:
        return None
    query, stored = np.asarray(params["query_vector"], float), np.asarray(vector, float)
    return float(query @ stored / (np.linalg.norm(query) * np.linalg.norm(stored)))


def scripted_search(request: Request):
    """A search answer that runs the request's script field over the fixture candidates."""
    script = request.body["script_fields"]["cosine"]["script"]
    hits = []
    for qid, score, vector in CANDIDATES[: request.body["size"]]:
        value = cosine_script(script["source"], script["params"], vector)
        hits.append({"_id": qid, "_score": score, "fields": {"cosine": [value]}})
    return 200, {"hits": {"hits": hits}}


class InMemoryBackend(Backend):
    """The fixture candidates behind the base class's two-step search_with_cosine (BM25 hits,
    then their vectors), as the embedded backend does it."""

    name = "memory"

    def search(self, text, k, only_ids=None):
        return [Hit(qid, score) for qid, score, _ in CANDIDATES[:k]]

    def vectors(self, ids):
        stored = {qid: vector for qid, _, vector in CANDIDATES}
        rows = np.array([stored[i] or [0.0] * 4 for i in ids], np.float32)
        return rows, np.array([stored[i] is not None for i in ids])

    def metadata(self):
        return {"model_fingerprint": "fake-model", "vector_dim": 4}

    upsert = delete = ids_not_in = commit = fetch = count = set_metadata = None


@pytest.fixture
def model_cluster(cluster):
    meta = {"vector_dim": 4, "model_fingerprint": "fake-model"}
    cluster.on("GET", "/qres-questions/_mapping", mapping(dims=4, meta=meta))
    cluster.on("POST", "/qres-questions/_search", scripted_search)
    return cluster


def test_dense_and_hybrid_send_one_search_with_a_cosine_script_field(model_cluster):
    encoder = TableEncoder({"usb": 0, "wifi": 1})
    pipeline = SearchPipeline(
        model_cluster.backend(), encoder, Fusion(0.4, 0.6), dense_candidates=0
    )
    pipeline.search("usb boot", 3, "hybrid", with_text=False)  # the ranking requests alone
    reads = [r for r in model_cluster.requests if r.path != "/qres-questions/_mapping"]
    (request,) = reads  # one search, no _mget of vectors
    query_vector = encoder.encode_query("usb boot").tolist()
    assert request.path == "/qres-questions/_search"
    assert request.body == {
        "query": {
            "multi_match": {
                "query": "usb boot",
                "type": "most_fields",
                "fields": ["title_terms^2.0", "body_terms"],
            }
        },
        "size": 100,  # the candidate window, fused by qres
        "_source": False,
        "track_total_hits": False,
        "script_fields": {
            "cosine": {
                "script": {"source": COSINE_SCRIPT, "params": {"query_vector": query_vector}}
            }
        },
    }
    assert "field('vector').get()" in COSINE_SCRIPT and "cosineSimilarity" in COSINE_SCRIPT


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
@pytest.mark.parametrize("query", ["usb", "wifi usb", "nothing alike"])
def test_fused_ranking_in_one_request_equals_the_embedded_path(model_cluster, mode, query):
    """The cluster's script cosines fused by qres give the ranking, scores and per-signal
    figures (--explain) that the two-step path of the embedded backend gives."""
    encoder = TableEncoder({"usb": 0, "wifi": 1, "nothing": 3})
    fusion = Fusion(0.35, 0.65)
    # BM25's candidates only: the request under test (the dense stage is tested apart)
    es = SearchPipeline(model_cluster.backend(), encoder, fusion, dense_candidates=0)
    es = es.search(query, 6, mode, with_text=False)
    reference = SearchPipeline(InMemoryBackend(), encoder, fusion)
    reference = reference.search(query, 6, mode, with_text=False)
    assert [r.id for r in es] == [r.id for r in reference]
    for got, want in zip(es, reference, strict=True):
        assert got.bm25 == want.bm25
        assert got.score == pytest.approx(want.score, abs=1e-6)
        assert (got.cosine is None) == (want.cosine is None)
        if want.cosine is not None:
            assert got.cosine == pytest.approx(want.cosine, abs=1e-6)
    assert es[-1].id == "c3" and es[-1].cosine is None  # no vector: after the rescored ones


def test_search_with_cosine_without_terms_sends_nothing(model_cluster):
    backend = model_cluster.backend()
    hits, cosine, has = backend.search_with_cosine("the of", 10, np.ones(4, np.float32) / 2)
    assert (hits, len(cosine), len(has)) == ([], 0, 0)
    assert model_cluster.sent("POST", "/qres-questions/_search") == []
    backend.close()


def test_rescored_search_sends_a_script_score_rescore(vector_cluster):
    backend = vector_cluster.backend()
    query_vector = np.array([0.5, 0.5, 0.5, 0.5], np.float32)
    backend.search_rescored("boot usb", 10, query_vector, window=50, weights=(0.3, 0.7))
    (request,) = vector_cluster.sent("POST", "/qres-questions/_search")
    assert request.body["size"] == 10 and request.body["_source"] is False
    assert request.body["query"]["multi_match"]["query"] == "boot usb"
    assert request.body["rescore"] == {
        "window_size": 50,
        "query": {
            "rescore_query": {
                "script_score": {
                    "query": {"match_all": {}},
                    "script": {
                        "source": RESCORE_SCRIPT,
                        "params": {"query_vector": [0.5, 0.5, 0.5, 0.5]},
                    },
                }
            },
            "query_weight": 0.3,
            "rescore_query_weight": 0.7,
            "score_mode": "total",
        },
    }
    assert "cosineSimilarity(params.query_vector, 'vector') + 1.0" in RESCORE_SCRIPT
    backend.search_rescored("boot usb", 80, query_vector, window=50)
    assert vector_cluster.requests[-1].body["rescore"]["window_size"] == 80  # never below k
    backend.close()


def test_knn_search_and_hybrid(vector_cluster):
    backend = vector_cluster.backend()
    hits = backend.knn_search([1, 0, 0, 0], 5)
    request = vector_cluster.requests[-1]
    assert request.body == {
        "knn": {
            "field": "vector",
            "query_vector": [1.0, 0.0, 0.0, 0.0],
            "k": 5,
            "num_candidates": 100,
            "boost": 1.0,
        },
        "size": 5,
        "_source": False,
        "track_total_hits": False,
    }
    assert hits[0].id == "u1"
    backend.knn_search([1, 0, 0, 0], 5, num_candidates=3, text="usb", weights=(0.2, 0.8))
    body = vector_cluster.requests[-1].body
    assert body["knn"]["num_candidates"] == 5  # never below k
    assert body["knn"]["boost"] == 0.8
    assert body["query"]["multi_match"]["boost"] == 0.2
    assert body["query"]["multi_match"]["query"] == "usb"
    backend.close()


# -- the dense first stage: nearest ---------------------------------------------------------------


def test_nearest_is_one_knn_search_whose_scores_become_cosines(vector_cluster):
    """8.4 on: the top-level knn section (Elasticsearch 8 reference, "kNN search": field,
    query_vector, k, num_candidates); with the cosine similarity the hit score is
    (1 + cosine) / 2, turned back into the cosine."""
    vector_cluster.on("POST", "/qres-questions/_search", search_answer(("u3", 0.9), ("u1", 0.25)))
    backend = vector_cluster.backend()
    hits = backend.nearest(np.array([0.0, 1.0, 0.0, 0.0]), 2)
    (request,) = vector_cluster.sent("POST", "/qres-questions/_search")
    assert request.body == {
        "knn": {
            "field": "vector",
            "query_vector": [0.0, 1.0, 0.0, 0.0],
            "k": 2,
            "num_candidates": 100,
        },
        "size": 2,
        "_source": False,
        "track_total_hits": False,
    }
    assert [(h.id, h.score) for h in hits] == [("u3", pytest.approx(0.8)), ("u1", -0.5)]
    assert "_source" not in json.dumps(request.body["knn"])  # vectors never leave the cluster
    assert [r.path for r in vector_cluster.requests].count("/") == 1  # the version, asked once
    backend.nearest(np.array([0.0, 1.0, 0.0, 0.0]), 2)
    assert [r.path for r in vector_cluster.requests].count("/") == 1
    backend.close()


def test_nearest_for_the_dense_first_stage_asks_for_the_beam_its_recall_needs(vector_cluster):
    """Search's dense first stage asks for its 100 nearest questions. The embedded
    backend's graph (HNSW, M = 16) reached recall@100 >= 0.98 against the exact scan on real
    MiniLM vectors from a beam of ann.EF = 200 candidates (docs/scale.md): the knn request
    asks each shard for at least that many (Lucene's HNSW is another build of the same graph:
    its recall is not measured here, docs/elasticsearch.md)."""
    from qres.backends.embedded import ann
    from qres.ranking.search import DEFAULT_DENSE_CANDIDATES

    vector_cluster.on("POST", "/qres-questions/_search", search_answer(("u3", 0.9)))
    backend = vector_cluster.backend()
    backend.nearest(np.array([0.0, 1.0, 0.0, 0.0]), DEFAULT_DENSE_CANDIDATES)
    (request,) = vector_cluster.sent("POST", "/qres-questions/_search")
    assert request.body["knn"]["k"] == DEFAULT_DENSE_CANDIDATES == 100
    assert request.body["knn"]["num_candidates"] >= ann.EF
    backend.close()


def test_nearest_before_8_4_is_an_exact_script_score_over_doc_values():
    cluster = FakeCluster(version="8.3.3")
    cluster.on("GET", "/qres-questions/_mapping", mapping(dims=4, meta={"vector_dim": 4}))
    cluster.on("POST", "/qres-questions/_search", search_answer(("u2", 1.5)))
    backend = cluster.backend()
    hits = backend.nearest([1.0, 0.0, 0.0, 0.0], 3)
    (request,) = cluster.sent("POST", "/qres-questions/_search")
    script = request.body["query"]["script_score"]["script"]
    assert request.body["query"]["script_score"]["query"] == {"match_all": {}}
    assert script["source"] == (
        "doc['vector'].size() == 0 ? 0.0 : cosineSimilarity(params.query_vector, 'vector') + 1.0"
    )
    assert script["params"] == {"query_vector": [1.0, 0.0, 0.0, 0.0]}
    assert request.body["min_score"] > 0 and request.body["size"] == 3
    assert [(h.id, h.score) for h in hits] == [("u2", 0.5)]
    backend.close()


def test_hybrid_with_the_dense_stage_adds_a_knn_search_and_scores_what_it_found(model_cluster):
    """BM25 with cosines (one request), the model's nearest (knn), then the nearest ones
    BM25 missed scored alike (restricted to their ids): three searches, no vector read."""

    def search(request):
        if "knn" in request.body:
            return 200, search_answer(("c9", 0.9), ("c1", 0.8))  # c1: BM25 has it already
        return scripted_search(request)

    model_cluster.on("POST", "/qres-questions/_search", search)
    pipeline = SearchPipeline(model_cluster.backend(), TableEncoder({"usb": 0}), Fusion(0.4, 0.6))
    pipeline.search("usb boot", 3, "hybrid", with_text=False)  # the ranking requests alone
    searches = model_cluster.sent("POST", "/qres-questions/_search")
    assert [("knn" in r.body, "script_fields" in r.body) for r in searches] == [
        (False, True),
        (True, False),
        (False, True),
    ]
    restricted = searches[2].body["query"]["bool"]["filter"][0]["ids"]["values"]
    assert restricted == ["c9"]
    assert not model_cluster.sent("POST", "/qres-questions/_mget")  # vectors stay there


def test_the_cosine_script_reads_doc_values_never_the_source():
    """The hybrid request's cosine per hit comes from the fields API: field('vector').get() is
    the DenseVector over the field's doc values (VectorValues of an indexed vector, binary doc
    values otherwise), never _source, for every model's field."""
    for field in ("vector", "vector_0123456789abcdef"):
        source = cosine_field([1.0, 0.0], field)["script"]["source"]
        assert f"field('{field}').get()" in source and "cosineSimilarity" in source
        assert "_source" not in source and "params['_source']" not in source


# -- reading -----------------------------------------------------------------------------------


def mget_answer(request):
    docs = []
    for qid in request.body["ids"]:
        if qid.startswith("nope"):
            docs.append({"_id": qid, "found": False})
        else:
            vector = [float(qid[-1])] * 4 if qid != "u5" else None
            source = {"vector": vector} if vector else {}
            if request.params["_source_includes"] != "vector":
                source = {"title": f"title {qid}", "body": "body", "tags": ["a", "b"]}
                if qid.startswith("x"):  # written with extras
                    source["extras"] = {"answer_count": 2, "closed_date": "2013-05-01"}
            docs.append({"_id": qid, "found": True, "_source": source})
    return 200, {"docs": docs}


def test_vectors_fetch_only_the_vector_field_as_last_committed(vector_cluster):
    vector_cluster.on("POST", "/qres-questions/_mget", mget_answer)
    backend = vector_cluster.backend()
    got, has = backend.vectors(["u3", "u1", "nope", "u3", "u5"])
    (request,) = vector_cluster.sent("POST", "/qres-questions/_mget")
    assert request.body == {"ids": ["u3", "u1", "nope", "u5"]}  # each id once
    assert request.params == {"_source_includes": "vector", "realtime": "false"}
    assert has.tolist() == [True, True, False, True, False]
    assert got.dtype == np.float32 and got.shape == (5, 4)
    np.testing.assert_array_equal(got[:, 0], [3, 1, 0, 3, 0])
    backend.close()


def test_vectors_without_a_vector_field_send_nothing(cluster):
    backend = cluster.backend()
    got, has = backend.vectors(["u1"])
    assert got.shape == (1, 0) and has.tolist() == [False]
    assert cluster.sent("POST", "/qres-questions/_mget") == []
    backend.close()


def test_fetch_asks_for_stored_fields_only(cluster):
    cluster.on("POST", "/qres-questions/_mget", mget_answer)
    backend = cluster.backend()
    got = backend.fetch(["u1", "nope", "x1"])
    (request,) = cluster.sent("POST", "/qres-questions/_mget")
    assert request.params == {"_source_includes": "title,body,tags,extras", "realtime": "false"}
    assert got == {
        "u1": Question("u1", "title u1", "body", ("a", "b")),
        "x1": Question("x1", "title x1", "body", ("a", "b")),
    }
    assert got["u1"].extras == {}
    assert got["x1"].extras == {"answer_count": 2, "closed_date": "2013-05-01"}
    backend.close()


def test_large_id_lists_are_fetched_in_batches(cluster):
    cluster.on("POST", "/qres-questions/_mget", mget_answer)
    backend = cluster.backend()
    backend.fetch([f"q{i}" for i in range(2500)])
    assert [len(r.body["ids"]) for r in cluster.sent("POST", "/qres-questions/_mget")] == [
        1000,
        1000,
        500,
    ]
    backend.close()


def test_count_and_metadata(cluster):
    cluster.on("POST", "/qres-questions/_count", {"count": 42})
    backend = cluster.backend()
    assert backend.count() == 42
    assert backend.metadata() == {"format": 2, "analyzer": "english", "title_boost": 2.0}
    backend.set_metadata({"model_fingerprint": "abc", "vector_dim": 4})
    put = cluster.sent("PUT", "/qres-questions/_mapping")[-1]
    assert put.body == {
        "_meta": {
            "format": 2,
            "analyzer": "english",
            "title_boost": 2.0,
            "model_fingerprint": "abc",
            "vector_dim": 4,
        }
    }
    backend.close()


# -- rebuilding behind the alias ---------------------------------------------------------------


@pytest.fixture
def rebuild_cluster(cluster):
    versions = {"indices": [{"name": "qres-questions-v1", "aliases": ["qres-questions"]}]}
    cluster.on("GET", "/_resolve/index/qres-questions-v\\*", versions)
    alias = {"aliases": [{"name": "qres-questions", "indices": ["qres-questions-v1"]}]}
    cluster.on("GET", "/_resolve/index/qres-questions", alias)
    cluster.on("PUT", "/qres-questions-v2", {"acknowledged": True})
    cluster.on("GET", "/qres-questions-v2/_mapping", mapping("qres-questions-v2"))
    cluster.on("PUT", "/qres-questions-v2/_mapping", {"acknowledged": True})
    cluster.on("POST", "/qres-questions-v2/_refresh", {})
    cluster.on("POST", "/_aliases", {"acknowledged": True})
    cluster.on("DELETE", "/qres-questions-v[12]", {"acknowledged": True})
    return cluster


def test_a_rebuild_deletes_what_interrupted_rebuilds_left_and_info_reports_it(rebuild_cluster):
    c = rebuild_cluster
    versions = {
        "indices": [
            {"name": "qres-questions-v1", "aliases": ["qres-questions"]},
            {"name": "qres-questions-v2"},  # a killed rebuild's, behind no alias
            {"name": "qres-questions-v3"},
            {"name": "qres-questions-verbatim"},  # not a version: never touched
        ]
    }
    c.on("GET", "/_resolve/index/qres-questions-v\\*", versions)
    for name in ("qres-questions-v2", "qres-questions-v3"):  # by a qres that named no builder
        c.on("GET", f"/{name}/_mapping", mapping(name))
    c.on("POST", "/qres-questions/_count", {"count": 3})
    assert c.backend().describe()["orphaned_indices"] == ["qres-questions-v2", "qres-questions-v3"]
    c.on("PUT", "/qres-questions-v4", {"acknowledged": True})
    c.on("DELETE", "/qres-questions-v2,qres-questions-v3", {"acknowledged": True})
    backend = c.backend(rebuild=True)
    deletes = [r.path for r in c.sent("DELETE", ".*")]
    assert deletes == ["/qres-questions-v2,qres-questions-v3"]
    order = [(r.method, r.path) for r in c.requests]
    assert order.index(("DELETE", deletes[0])) < order.index(("PUT", "/qres-questions-v4"))
    backend.abort_rebuild = lambda: None  # the fake has no v4 delete route; not under test
    backend.close()


def test_sigterm_during_a_rebuild_deletes_the_new_index(rebuild_cluster):
    from qres.cli import Terminated

    c = rebuild_cluster
    with pytest.raises(Terminated), c.backend(rebuild=True):
        raise Terminated()  # what the CLI's SIGTERM handler raises
    assert [r.path for r in c.sent("DELETE", ".*")] == ["/qres-questions-v2"]
    assert c.sent("POST", "/_aliases") == []


def test_a_rebuild_is_refused_while_another_process_here_builds_one(rebuild_cluster):
    import socket

    c = rebuild_cluster
    versions = {
        "indices": [
            {"name": "qres-questions-v1", "aliases": ["qres-questions"]},
            {"name": "qres-questions-v2"},  # a rebuild a live process of this machine runs
        ]
    }
    c.on("GET", "/_resolve/index/qres-questions-v\\*", versions)
    owner = {"host": socket.gethostname(), "pid": os.getpid()}
    c.on(
        "GET", "/qres-questions-v2/_mapping", mapping("qres-questions-v2", meta={"built_by": owner})
    )
    with pytest.raises(BackendError, match="being rebuilt into qres-questions-v2 by another qres"):
        c.backend(rebuild=True)
    assert c.sent("DELETE", ".*") == [] and c.sent("PUT", "/qres-questions-v.*") == []


def test_a_swap_whose_answer_was_lost_keeps_the_index_the_alias_now_names(rebuild_cluster):
    from elastic_transport import ConnectionTimeout

    c = rebuild_cluster
    backend = c.backend(rebuild=True)
    swapped = {"aliases": [{"name": "qres-questions", "indices": ["qres-questions-v2"]}]}

    def applied_then_timed_out(request):
        c.on("GET", "/_resolve/index/qres-questions", swapped)  # the cluster did swap
        raise ConnectionTimeout("read timed out")

    c.on("POST", "/_aliases", applied_then_timed_out)
    with pytest.raises(BackendError):
        backend.finish_rebuild()
    backend.close()
    assert c.sent("DELETE", "/qres-questions-v2") == []  # what the alias names is kept


def test_a_rebuild_stopped_where_the_alias_cannot_be_read_keeps_its_index(rebuild_cluster):
    from elastic_transport import ConnectionError as Unreachable

    c = rebuild_cluster
    backend = c.backend(rebuild=True)

    def unreachable(request):
        raise Unreachable("connection refused")

    c.on("GET", "/_resolve/index/qres-questions", unreachable)
    backend.close()
    assert c.sent("DELETE", "/qres-questions-v2") == []  # maybe live: a later rebuild decides


def test_rebuild_fills_a_new_index_and_swaps_the_alias_atomically(rebuild_cluster):
    c = rebuild_cluster
    with c.backend(rebuild=True, vector_dims=4) as backend:
        (create,) = c.sent("PUT", "/qres-questions-v2")
        assert "aliases" not in create.body  # invisible to searches while it fills
        backend.upsert(QUESTIONS[:1], vectors_for(1))
        backend.commit()
        assert c.sent("GET", "/qres-questions/_mapping") == []  # the old index is not read
        assert bulk_lines(c.sent("PUT", "/_bulk")[0])[0][0]["index"]["_index"] == (
            "qres-questions-v2"
        )
        assert c.sent("POST", "/_aliases") == []  # commits do not swap

    (swap,) = c.sent("POST", "/_aliases")
    assert swap.body == {
        "actions": [
            {"remove": {"index": "qres-questions-v1", "alias": "qres-questions"}},
            {"add": {"index": "qres-questions-v2", "alias": "qres-questions"}},
        ]
    }
    order = [(r.method, r.path) for r in c.requests]
    assert order.index(("POST", "/qres-questions-v2/_refresh")) < order.index(("POST", "/_aliases"))
    assert order.index(("POST", "/_aliases")) < order.index(("DELETE", "/qres-questions-v1"))
    assert c.sent("DELETE", "/qres-questions-v2") == []


def test_rebuild_interrupted_by_an_error_keeps_the_old_index(rebuild_cluster):
    c = rebuild_cluster
    with pytest.raises(KeyboardInterrupt), c.backend(rebuild=True) as backend:
        backend.upsert(QUESTIONS[:1])
        raise KeyboardInterrupt
    assert c.sent("POST", "/_aliases") == []
    assert len(c.sent("DELETE", "/qres-questions-v2")) == 1
    assert c.sent("DELETE", "/qres-questions-v1") == []


def test_explicit_begin_and_finish_rebuild(rebuild_cluster):
    c = rebuild_cluster
    backend = c.backend()
    assert backend.begin_rebuild() == "qres-questions-v2"
    backend.finish_rebuild()
    assert backend._target == "qres-questions"
    assert len(c.sent("POST", "/_aliases")) == 1
    backend.close()
    assert c.sent("DELETE", "/qres-questions-v2") == []  # finished: nothing discarded


def test_closing_without_finishing_discards_the_rebuild(rebuild_cluster):
    c = rebuild_cluster
    backend = c.backend()
    backend.begin_rebuild()
    backend.close()
    assert c.sent("POST", "/_aliases") == []
    (delete,) = c.sent("DELETE", "/qres-questions-v2")
    assert delete.params == {"ignore_unavailable": "true"}


def test_drop_deletes_every_index_behind_the_alias(rebuild_cluster):
    c = rebuild_cluster
    backend = c.backend()
    backend.drop()
    (delete,) = c.sent("DELETE", "/qres-questions-v1")
    assert c.sent("DELETE", "/qres-questions-v2") == []
    backend.close()


def test_rebuild_replaces_a_plain_index_named_like_the_alias(rebuild_cluster):
    c = rebuild_cluster
    concrete = {"indices": [{"name": "qres-questions"}], "aliases": []}
    c.on("GET", "/_resolve/index/qres-questions", concrete)
    with c.backend(rebuild=True):
        pass
    (swap,) = c.sent("POST", "/_aliases")
    assert swap.body["actions"] == [
        {"remove_index": {"index": "qres-questions"}},
        {"add": {"index": "qres-questions-v2", "alias": "qres-questions"}},
    ]


# -- search log --------------------------------------------------------------------------------


def test_log_search_creates_the_log_index_once_and_writes_records(cluster):
    cluster.on("HEAD", "/qres-search-log", None, status=404)
    cluster.on("PUT", "/qres-search-log", {"acknowledged": True})
    cluster.on("POST", "/qres-search-log/_doc", {"result": "created"})
    backend = cluster.backend()
    record = {
        "time": 1_700_000_000.0,
        "query": "boot from usb",
        "mode": "hybrid",
        "latency_ms": 12.5,
        "k": 10,
        "top_ids": ["u1", "u5"],
        "top_scores": [0.9, 0.4],
        "session": "abc",
    }
    backend.log_search(record)
    backend.log_search({**record, "top_ids": [], "top_scores": []})

    (create,) = cluster.sent("PUT", "/qres-search-log")
    template = json.loads((CONFIG_DIR / "search-log-template.json").read_text())["template"]
    assert create.body == {"settings": template["settings"], "mappings": template["mappings"]}
    assert len(cluster.sent("HEAD", "/qres-search-log")) == 1
    first, second = (r.body for r in cluster.sent("POST", "/qres-search-log/_doc"))
    assert first == {
        "@timestamp": "2023-11-14T22:13:20+00:00",
        "query": "boot from usb",
        "mode": "hybrid",
        "latency_ms": 12.5,
        "k": 10,
        "top_ids": ["u1", "u5"],
        "top_scores": [0.9, 0.4],
        "result_count": 2,
        "backend": "elasticsearch",
        "index": "qres-questions",
        "extra": {"session": "abc"},
    }
    assert second["result_count"] == 0  # what the zero-result panel counts
    backend.close()


def test_log_documents_fit_the_strict_log_mapping():
    template = json.loads((CONFIG_DIR / "search-log-template.json").read_text())
    properties = template["template"]["mappings"]["properties"]
    assert template["template"]["mappings"]["dynamic"] == "strict"
    doc = search_log_document({"query": "q", "k": 3, "top_ids": ["a"], "x": 1}, "embedded", "ix")
    assert set(doc) <= set(properties)
    assert properties["@timestamp"]["type"] == "date"
    assert properties["query"]["fields"]["keyword"]["type"] == "keyword"


# -- es_config and Kibana objects --------------------------------------------------------------


def test_index_templates_are_valid_composable_templates():
    for name, pattern in (
        ("questions-template.json", "qres-questions-*"),
        ("search-log-template.json", "qres-search-log*"),
    ):
        template = json.loads((CONFIG_DIR / name).read_text())
        assert set(template) <= {"index_patterns", "priority", "template", "_meta", "version"}
        assert template["index_patterns"] == [pattern]
        assert set(template["template"]) == {"settings", "mappings"}
    questions = json.loads((CONFIG_DIR / "questions-template.json").read_text())
    properties = questions["template"]["mappings"]["properties"]
    analysis = questions["template"]["settings"]["index"]["analysis"]
    for field in ("title_terms", "body_terms"):
        assert properties[field]["analyzer"] in analysis["analyzer"]
    for field in ("title", "body"):
        assert properties[field]["index"] is False  # stored for display, searched as terms


def test_an_index_made_by_an_older_qres_asks_for_a_rebuild():
    c = FakeCluster()
    old = mapping(meta={"format": 1})
    for name in ("title_terms", "body_terms"):
        del old["qres-questions-v1"]["mappings"]["properties"][name]
    c.on("GET", "/qres-questions/_mapping", old)
    with pytest.raises(BackendError) as err:
        c.backend()
    assert str(err.value) == (
        f"'qres-questions' at {URL} was made by an older qres (index format 1, analysed by "
        "Elasticsearch rather than as qres's own BM25 terms): rebuild it with "
        "`qres --backend elasticsearch index --rebuild CORPUS`"
    )


def saved_objects() -> list[dict]:
    return [json.loads(line) for line in SAVED_OBJECTS.read_text().splitlines() if line]


def test_kibana_objects_reference_each_other_and_the_log_fields():
    objects = saved_objects()
    by_key = {(o["type"], o["id"]): o for o in objects}
    assert len(by_key) == len(objects)
    for obj in objects:
        assert obj["typeMigrationVersion"].startswith("8.")  # importable into 8.x and 9.x
        for ref in obj["references"]:
            assert (ref["type"], ref["id"]) in by_key, ref
    views = {o["attributes"]["title"]: o for o in objects if o["type"] == "index-pattern"}
    assert set(views) == {DEFAULT_INDEX, DEFAULT_LOG_INDEX}
    assert views[DEFAULT_LOG_INDEX]["attributes"]["timeFieldName"] == "@timestamp"

    log_fields = set(
        json.loads((CONFIG_DIR / "search-log-template.json").read_text())["template"]["mappings"][
            "properties"
        ]
    ) | {"query.keyword"}
    visualizations = [o for o in objects if o["type"] == "visualization"]
    used = set()
    for vis in visualizations:
        state = json.loads(vis["attributes"]["visState"])
        used |= {a["params"]["field"] for a in state["aggs"] if "field" in a["params"]}
        source = json.loads(vis["attributes"]["kibanaSavedObjectMeta"]["searchSourceJSON"])
        (ref,) = [r for r in vis["references"] if r["name"] == source["indexRefName"]]
        assert by_key[("index-pattern", ref["id"])]["attributes"]["title"] == DEFAULT_LOG_INDEX
    assert used == {"@timestamp", "latency_ms", "query.keyword", "mode"}
    assert used <= log_fields
    zero = by_key[("visualization", "qres-zero-result-queries")]
    query = json.loads(zero["attributes"]["kibanaSavedObjectMeta"]["searchSourceJSON"])["query"]
    assert query == {"query": "result_count : 0", "language": "kuery"}

    (dashboard,) = [o for o in objects if o["type"] == "dashboard"]
    panels = json.loads(dashboard["attributes"]["panelsJSON"])
    refs = {r["name"]: r["id"] for r in dashboard["references"]}
    assert sorted(refs[f"{p['panelIndex']}:{p['panelRefName']}"] for p in panels) == sorted(
        v["id"] for v in visualizations
    )


class RecordingHttp:
    """Stands in for urllib3.PoolManager: records the request, answers with a canned one."""

    def __init__(self, status=200, body=None):
        self.calls = []
        self.status, self.body = status, body or {"success": True, "successCount": 6}

    def request(self, method, url, fields=None, headers=None):
        self.calls.append((method, url, fields, headers))
        return type("Answer", (), {"status": self.status, "data": json.dumps(self.body).encode()})


def test_kibana_import_request():
    http = RecordingHttp()
    config = EsConfig(url=URL, user="elastic", password=PASSWORD)
    ndjson = SAVED_OBJECTS.read_bytes()
    assert import_saved_objects("http://kb.test:5601/", ndjson, config, http=http) == 6
    ((method, url, fields, headers),) = http.calls
    assert (method, url) == ("POST", "http://kb.test:5601/api/saved_objects/_import?overwrite=true")
    assert fields == {"file": ("qres.ndjson", ndjson, "application/ndjson")}
    assert headers["kbn-xsrf"]
    assert headers["authorization"].startswith("Basic ")
    import_saved_objects("http://kb.test:5601", ndjson, config, space="team", http=http)
    assert (
        http.calls[-1][1] == "http://kb.test:5601/s/team/api/saved_objects/_import?overwrite=true"
    )
    import_saved_objects("http://kb.test:5601", ndjson, EsConfig(url=URL, api_key="k"), http=http)
    assert http.calls[-1][3]["Authorization"] == "ApiKey k"


# -- docker-compose.yml ------------------------------------------------------------------------

COMPOSE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"


def compose_cli() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


def test_compose_file_validates_with_the_documented_env():
    cli = compose_cli()
    if cli is None:
        if os.environ.get("QRES_REQUIRE_COMPOSE"):  # CI (.ci/run) installs it
            pytest.fail("QRES_REQUIRE_COMPOSE is set but docker-compose is not installed")
        pytest.skip("no docker-compose or `docker compose` here to validate docker-compose.yml")
    run = subprocess.run(
        [
            *cli,
            "--project-directory",
            str(REPO),
            "-f",
            str(COMPOSE),
            "--env-file",
            str(ENV_EXAMPLE),
            "config",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    services = subprocess.run(
        [
            *cli,
            "--project-directory",
            str(REPO),
            "-f",
            str(COMPOSE),
            "--env-file",
            str(ENV_EXAMPLE),
            "config",
            "--services",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert set(services.stdout.split()) == {"elasticsearch", "kibana", "setup", "qres"}


def test_compose_structure():
    yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read docker-compose.yml")
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert set(services) == {"elasticsearch", "kibana", "setup", "qres"}
    for name in ("elasticsearch", "kibana"):
        assert services[name]["healthcheck"]["test"][0] == "CMD-SHELL"
        assert all(p.startswith("127.0.0.1:") for p in services[name]["ports"])
    env = services["elasticsearch"]["environment"]
    assert env["xpack.security.enabled"] == "true"
    assert env["discovery.type"] == "single-node"
    assert "${ELASTIC_PASSWORD" in env["ELASTIC_PASSWORD"]
    version = re.search(r":-(\d+)\.(\d+)\.(\d+)\}", services["elasticsearch"]["image"])
    assert version and (int(version[1]), int(version[2])) >= (8, 15)
    assert services["kibana"]["image"].endswith(version[0])  # same pinned stack version
    assert services["kibana"]["depends_on"]["elasticsearch"]["condition"] == "service_healthy"
    setup = services["setup"]
    assert setup["depends_on"]["elasticsearch"]["condition"] == "service_healthy"
    assert "./es_config:/qres/es_config:ro" in setup["volumes"]
    assert setup["command"] == ["bash", "/qres/es_config/setup.sh"]


def test_compose_variables_are_documented_in_env_example():
    used = set(re.findall(r"\$\{([A-Z_]+)", COMPOSE.read_text()))
    documented = {
        line.split("=", 1)[0]
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert used and used <= documented


def test_setup_script_is_valid_bash_and_loads_existing_files():
    script = CONFIG_DIR / "setup.sh"
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    text = script.read_text()
    for name in ("questions-template.json", "search-log-template.json", "kibana/qres.ndjson"):
        assert (CONFIG_DIR / name).is_file()
    assert "$name-template.json" in text and "kibana/qres.ndjson" in text
    assert "_index_template/qres-$name" in text
    assert "/api/saved_objects/_import?overwrite=true" in text and "kbn-xsrf" in text


def test_healthcheck_sends_the_password_as_a_header_never_on_the_command_line(tmp_path):
    import base64
    import os

    yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read docker-compose.yml")
    compose = yaml.safe_load(COMPOSE.read_text())
    kind, command = compose["services"]["elasticsearch"]["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    fake_curl = tmp_path / "curl"  # records its arguments and what it reads from stdin
    fake_curl.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/argv\ncat > {tmp_path}/stdin\n'
    )
    fake_curl.chmod(0o755)
    password = 'Pa55 "w0rd"$x\\'
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "ELASTIC_PASSWORD": password}
    shell = command.replace("$$", "$")  # compose's escape for a literal $
    run = subprocess.run(["sh", "-c", shell], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    argv = (tmp_path / "argv").read_text()
    assert "Pa55" not in argv and "--header\n@-" in argv
    token = base64.b64encode(f"elastic:{password}".encode()).decode()
    assert (tmp_path / "stdin").read_text() == f"Authorization: Basic {token}\n"


def test_compose_file_points_at_documentation_that_exists():
    first = COMPOSE.read_text().splitlines()[0]
    assert "(docs/elasticsearch.md)" in first
    assert "# Scaling out with Elasticsearch" in (REPO / "docs" / "elasticsearch.md").read_text()
    text = COMPOSE.read_text() + ENV_EXAMPLE.read_text()
    assert text.count("first start only") == 2  # ELASTIC_PASSWORD's caveat, in both files


def test_a_rebuild_index_records_who_builds_it(rebuild_cluster):
    import socket

    c = rebuild_cluster
    c.backend(rebuild=True)
    (put,) = c.sent("PUT", "/qres-questions-v2")
    built_by = put.body["mappings"]["_meta"]["built_by"]
    assert built_by == {"host": socket.gethostname(), "pid": os.getpid()}


def test_writers_remove_only_orphans_whose_rebuild_is_gone_and_info_sizes_them(
    rebuild_cluster, caplog
):
    import socket

    c = rebuild_cluster
    versions = {
        "indices": [
            {"name": "qres-questions-v1", "aliases": ["qres-questions"]},
            {"name": "qres-questions-v2"},  # killed here: its process is gone
            {"name": "qres-questions-v3"},  # being built by a live process here
            {"name": "qres-questions-v4"},  # built on another machine: may be running
        ]
    }
    c.on("GET", "/_resolve/index/qres-questions-v\\*", versions)
    here = socket.gethostname()
    dead = subprocess_pid_that_exited()
    owners = {
        "qres-questions-v2": {"host": here, "pid": dead},
        "qres-questions-v3": {"host": here, "pid": os.getpid()},
        "qres-questions-v4": {"host": here + "-elsewhere", "pid": dead},
    }
    for name, owner in owners.items():
        c.on("GET", f"/{name}/_mapping", mapping(name, meta={"built_by": owner}))
        stats = {"indices": {name: {"total": {"store": {"size_in_bytes": 1234}}}}}
        c.on("GET", f"/{name}/_stats/store", stats)
    backend = c.backend()
    found = backend.leftovers()
    assert [f["path"] for f in found] == list(owners)
    assert {f["bytes"] for f in found} == {1234}
    assert not c.sent("DELETE", ".*")  # a reader removes nothing
    with caplog.at_level("WARNING"):
        backend.acquire_write_lock()
    assert [r.path for r in c.sent("DELETE", ".*")] == ["/qres-questions-v2"]
    assert "removed qres-questions-v2, left behind by an interrupted rebuild" in caplog.text
    backend.close()


def subprocess_pid_that_exited() -> int:
    import sys

    code = "import os; print(os.getpid())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return int(proc.stdout)


def test_a_closed_duplicate_found_on_elasticsearch_gives_way_to_its_original(cluster):
    """The same walk as on the embedded index (qres.ranking.duplicates): the hits' stored
    fields are read with one _mget, the original the duplicate names with another."""
    cluster.on("GET", "/qres-questions/_mapping", mapping(meta={"closed_duplicates": True}))
    cluster.on("POST", "/qres-questions/_search", search_answer(("d1", 3.0), ("u2", 2.0)))

    def mget(request):
        docs = []
        for qid in request.body["ids"]:
            source = {"title": f"title {qid}", "body": "body", "tags": []}
            if qid == "d1":
                source["extras"] = {"duplicate_of": "o1", "duplicate_dates": "2013-05-01"}
            docs.append({"_id": qid, "found": True, "_source": source})
        return 200, {"docs": docs}

    cluster.on("POST", "/qres-questions/_mget", mget)
    backend = cluster.backend()
    results = SearchPipeline(backend).search("visa", 2)
    assert [(r.id, r.via, r.score, r.title) for r in results] == [
        ("o1", "d1", 3.0, "title o1"),
        ("u2", None, 2.0, "title u2"),
    ]
    asked = [r.body["ids"] for r in cluster.sent("POST", "/qres-questions/_mget")]
    assert asked == [["d1", "u2"], ["o1"]]  # nothing read twice for display
    backend.close()
