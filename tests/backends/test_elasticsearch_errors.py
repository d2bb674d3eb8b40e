"""Each way talking to Elasticsearch (or Kibana) can fail gives one sentence naming the URL and
what to do, never a traceback, and never a secret.

Connection refused is real (127.0.0.1 on a port nothing listens on); the other failures are
canned answers or exceptions of the recording transport in test_elasticsearch_requests.
"""

from __future__ import annotations

import json
import socket
import ssl

import pytest
from click.testing import CliRunner
from elastic_transport import ConnectionTimeout, TlsError

from qres.backends.base import BackendError
from qres.backends.elasticsearch import EsBackend, EsConfig, load_config
from qres.backends.elasticsearch.kibana import KibanaError, import_saved_objects
from qres.cli import cli

from .contract import QUESTIONS, vectors_for
from .test_elasticsearch_requests import (
    PASSWORD,
    URL,
    FakeCluster,
    RecordingHttp,
    es_error,
    mapping,
)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_sentence(err: BaseException, *, url: str = URL) -> str:
    message = str(err)
    assert "\n" not in message and "Traceback" not in message
    assert url in message
    assert PASSWORD not in message and "a2V5OnNlY3JldA" not in message
    # No chained client exception to print: raised directly or `from None`.
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)
    return message


def failing(
    answer, status=200, path="/qres-questions/_mapping", node_class_options=None, **backend
) -> BackendError:
    cluster = FakeCluster().on("GET", path, answer, status=status)
    with pytest.raises(BackendError) as caught:
        if node_class_options is None:
            cluster.backend(**backend)
        else:
            node_class = cluster.node_class(**node_class_options)
            EsBackend(config=EsConfig(url=URL), node_class=node_class, **backend)
    return caught.value


@pytest.fixture(autouse=True)
def no_user_settings(monkeypatch, tmp_path):
    """Neither the developer's environment nor their es.json leaks into these tests."""
    for name in ("URL", "USER", "PASSWORD", "API_KEY", "CA_CERT", "TIMEOUT"):
        monkeypatch.delenv(f"QRES_ES_{name}", raising=False)
    monkeypatch.delenv("QRES_KIBANA_URL", raising=False)
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))


# -- reaching the cluster ----------------------------------------------------------------------


def test_connection_refused_is_real_and_says_how_to_start_the_cluster(monkeypatch):
    url = f"http://127.0.0.1:{unused_port()}"
    monkeypatch.setenv("QRES_ES_USER", "elastic")
    monkeypatch.setenv("QRES_ES_PASSWORD", PASSWORD)
    with pytest.raises(BackendError) as caught:
        EsBackend(url)
    message = one_sentence(caught.value, url=url)
    assert message == (
        f"cannot reach Elasticsearch at {url} (connection refused): start it "
        "(`docker compose up -d`) or set QRES_ES_URL to its address"
    )


def test_url_credentials_are_masked_in_messages():
    url = f"http://elastic:{PASSWORD}@127.0.0.1:{unused_port()}"
    with pytest.raises(BackendError) as caught:
        EsBackend(url)
    message = str(caught.value)
    assert PASSWORD not in message and "http://***@127.0.0.1:" in message


def test_timeout():
    err = failing(ConnectionTimeout("Connection timed out"))
    assert one_sentence(err) == (
        f"Elasticsearch at {URL} did not answer within 30 s: check that the cluster is healthy "
        "(GET _cluster/health) or allow more time with QRES_ES_TIMEOUT"
    )


def test_tls_failure_points_at_the_ca_certificate():
    cause = ssl.SSLCertVerificationError(
        1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed (_ssl.c:1006)"
    )
    err = failing(TlsError("TLS error", errors=(cause,)))
    message = one_sentence(err)
    assert message.startswith(
        f"TLS connection to Elasticsearch at {URL} failed ([SSL: CERTIFICATE_VERIFY_FAILED] "
    )
    assert "QRES_ES_CA_CERT" in message


def test_not_elasticsearch():
    cluster = FakeCluster().on("GET", "/qres-questions/_mapping", {"ok": True})
    with pytest.raises(BackendError) as caught:
        EsBackend(config=EsConfig(url=URL), node_class=cluster.node_class(product_header=False))
    message = one_sentence(caught.value)
    assert message.startswith(f"{URL} answered but is not Elasticsearch")
    assert "QRES_ES_URL" in message


@pytest.fixture
def web_server(tmp_path):
    """A plain web server on loopback (python -m http.server's handler): it answers 404 with
    an HTML page for every Elasticsearch path, and the root with a directory listing."""
    import threading
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = partial(Quiet, directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_web_server_that_is_not_elasticsearch_is_named_so_whatever_its_status(
    web_server, monkeypatch
):
    monkeypatch.setenv("QRES_ES_URL", web_server)
    result = CliRunner().invoke(cli, ["--backend", "elasticsearch", "search", "x"])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: {web_server} answered but is not Elasticsearch")
    assert "(HTTP 404" in result.output and "refused the request" not in result.output
    assert result.output.count("\n") == 1


def test_elasticsearch_errors_without_the_product_header_are_still_elasticsearch():
    """A 7.x server sends no product header; its error bodies still say who answered."""
    refusal = es_error(400, "illegal_argument_exception", "bad things")
    message = str(failing(refusal, status=400, node_class_options={"product_header": False}))
    assert "refused the request on qres-questions (HTTP 400, illegal_argument_exception" in message


@pytest.mark.parametrize("url", ["http://127.0.0.1:9200/es", "http://localhost:9200/?pretty"])
def test_a_url_with_a_path_is_refused_in_qres_words(monkeypatch, url):
    monkeypatch.setenv("QRES_ES_URL", url)
    with pytest.raises(BackendError) as caught:
        load_config()
    message = str(caught.value)
    assert message.startswith(f"Elasticsearch URL {url!r} has a path")
    assert "scheme, host and port only" in message


def test_info_with_the_server_down_exits_non_zero_with_one_line(monkeypatch):
    url = f"http://127.0.0.1:{unused_port()}"
    monkeypatch.setenv("QRES_ES_URL", url)
    result = CliRunner().invoke(cli, ["--backend", "elasticsearch", "info"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"error: cannot reach Elasticsearch at {url}")
    assert result.output.count("\n") == 1


def test_info_of_an_index_not_made_yet_is_a_state_not_an_error(tmp_path):
    result = CliRunner().invoke(cli, ["--index-dir", str(tmp_path / "none"), "--json", "info"])
    assert result.exit_code == 0, result.output
    assert "no qres index at" in json.loads(result.output)["index"]


# -- credentials and privileges ----------------------------------------------------------------


def test_rejected_credentials():
    err = failing(es_error(401, "security_exception", "unable to authenticate"), status=401)
    message = one_sentence(err)
    assert message.startswith(f"Elasticsearch at {URL} rejected the credentials (basic (user ")
    assert "QRES_ES_PASSWORD" in message and "QRES_ES_API_KEY" in message


def test_missing_credentials():
    cluster = FakeCluster().on(
        "GET", "/qres-questions/_mapping", es_error(401, "security_exception", "missing"), 401
    )
    with pytest.raises(BackendError) as caught:
        cluster.backend(EsConfig(url=URL))
    assert one_sentence(caught.value).startswith(
        f"Elasticsearch at {URL} requires credentials: set QRES_ES_USER and QRES_ES_PASSWORD"
    )


def test_missing_privilege():
    err = failing(
        es_error(403, "security_exception", "action [indices:admin/mappings/get] is unauthorized"),
        status=403,
    )
    message = one_sentence(err)
    assert message.startswith(f"the Elasticsearch user may not do this on qres-questions at {URL}")
    assert "is unauthorized" in message


# -- the index ---------------------------------------------------------------------------------


def test_missing_index():
    err = failing(es_error(404, "index_not_found_exception", "no such index"), status=404)
    assert one_sentence(err) == (
        f"no qres index 'qres-questions' at {URL}: create it with "
        "`qres --backend elasticsearch index CORPUS`"
    )


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (None, "no details"),  # an empty 404 (the client's message would be "None")
        (
            {"error": "alias [qres-questions] missing", "status": 404},
            "alias [qres-questions] missing",
        ),
        (
            es_error(404, "resource_not_found_exception", "no such resource"),
            "resource_not_found_exception: no such resource",
        ),
    ],
)
def test_other_not_found_answers_name_the_index_the_reason_and_what_to_check(answer, reason):
    err = failing(answer, status=404)
    assert one_sentence(err) == (
        f"Elasticsearch at {URL} found nothing for a request on index 'qres-questions' (HTTP "
        f"404, {reason}): create the index with `qres --backend elasticsearch index CORPUS` if "
        "it is missing, or check that QRES_ES_URL is the cluster's address"
    )


def test_an_empty_answer_from_something_else_says_so():
    err = failing(None, status=404, node_class_options={"product_header": False})
    assert one_sentence(err) == (
        f"{URL} answered but is not Elasticsearch (HTTP 404, no details): set QRES_ES_URL to an "
        "Elasticsearch 8 or 9 cluster"
    )


def test_index_deleted_while_open():
    cluster = FakeCluster().on("GET", "/qres-questions/_mapping", mapping())
    backend = cluster.backend()
    cluster.on(
        "POST",
        "/qres-questions/_search",
        es_error(404, "index_not_found_exception", "no such index"),
        status=404,
    )
    with pytest.raises(BackendError, match="^no qres index 'qres-questions'"):
        backend.search("usb", 5)
    backend.close()


def test_model_dimensions_differ_from_the_mapping():
    err = failing(mapping(dims=384), vector_dims=128)
    assert one_sentence(err) == (
        f"index 'qres-questions' at {URL} holds 384-dimensional vectors but the model makes 128: "
        "rebuild it with `qres --backend elasticsearch index --rebuild CORPUS --model MODEL_DIR`"
    )


def test_upserted_vectors_differ_from_the_mapping():
    cluster = FakeCluster().on("GET", "/qres-questions/_mapping", mapping(dims=4))
    backend = cluster.backend()
    with pytest.raises(BackendError, match=r"^vectors have 8 dimensions but the index holds 4: "):
        backend.upsert(QUESTIONS[:1], vectors_for(1, dim=8))
    assert cluster.sent("PUT", "/_bulk") == []  # nothing was written
    backend.close()


def test_query_vector_checks():
    cluster = FakeCluster().on("GET", "/qres-questions/_mapping", mapping())
    backend = cluster.backend()
    with pytest.raises(BackendError, match="holds no vectors: index it with"):
        backend.knn_search([1.0, 0.0], 3)
    cluster.on("GET", "/qres-questions/_mapping", mapping(dims=4))
    backend = cluster.backend()
    with pytest.raises(BackendError, match="query vector has 2 dimensions but .* 4-dimensional"):
        backend.search_rescored("usb", 3, [1.0, 0.0])


def test_alias_over_several_indices():
    both = {**mapping("qres-questions-v1"), **mapping("qres-questions-v2")}
    message = one_sentence(failing(both))
    assert "points at 2 indices (qres-questions-v1, qres-questions-v2)" in message


def test_an_index_that_is_not_a_qres_index():
    other = {"logs-1": {"mappings": {"properties": {"message": {"type": "text"}}}}}
    assert "is not a qres index" in one_sentence(failing(other))


def test_too_large_and_busy_answers_say_what_to_do_about_them():
    err = failing(None, status=413)
    assert one_sentence(err) == (
        f"Elasticsearch at {URL} refused a request on qres-questions as too large (HTTP 413, "
        "no details): index in smaller batches (qres index --batch-size N) or raise the "
        "cluster's http.max_content_length"
    )
    for status in (429, 503):
        busy = es_error(status, "es_rejected_execution_exception", "queue full")
        assert one_sentence(failing(busy, status=status)) == (
            f"Elasticsearch at {URL} is too busy to answer on qres-questions (HTTP {status}, "
            "es_rejected_execution_exception: queue full), after retries: try again later"
        )


def test_other_refusals_carry_the_servers_reason():
    cluster = FakeCluster().on("GET", "/qres-questions/_mapping", mapping())
    backend = cluster.backend()
    cluster.on(
        "POST",
        "/qres-questions/_search",
        es_error(400, "search_phase_execution_exception", "all shards failed"),
        status=400,
    )
    with pytest.raises(BackendError) as caught:
        backend.search("usb", 5)
    assert one_sentence(caught.value) == (
        f"Elasticsearch at {URL} refused the request on qres-questions (HTTP 400, "
        "search_phase_execution_exception: all shards failed): fix what it names and retry"
    )
    backend.close()


def test_all_shards_failed_names_the_root_cause():
    cluster = FakeCluster().on("GET", "/qres-questions/_mapping", mapping())
    backend = cluster.backend()
    script_error = {
        "type": "script_exception",
        "reason": "runtime error",
        "script_stack": ["v.cosineSimilarity(params.query_vector)"],
        "lang": "painless",
    }
    body = {
        "error": {
            "root_cause": [script_error],
            "type": "search_phase_execution_exception",
            "reason": "all shards failed",
            "phase": "query",
            "failed_shards": [
                {
                    "shard": 0,
                    "index": "qres-questions-v1",
                    "reason": {
                        **script_error,
                        "caused_by": {
                            "type": "illegal_argument_exception",
                            "reason": "dimensions differ: 3 != 4",
                        },
                    },
                }
            ],
        },
        "status": 400,
    }
    cluster.on("POST", "/qres-questions/_search", body, status=400)
    with pytest.raises(BackendError) as caught:
        backend.search("usb", 5)
    assert one_sentence(caught.value) == (
        f"Elasticsearch at {URL} refused the request on qres-questions (HTTP 400, "
        "search_phase_execution_exception: all shards failed; root cause script_exception: "
        "runtime error (dimensions differ: 3 != 4)): fix what it names and retry"
    )
    backend.close()


def test_a_refused_search_log_write_names_the_log_index():
    cluster = FakeCluster().on("GET", "/qres-questions/_mapping", mapping())
    cluster.on("HEAD", "/qres-search-log", None)
    denied = es_error(
        403,
        "security_exception",
        "action [indices:data/write/index] is unauthorized for user [reader] on indices "
        "[qres-search-log]",
    )
    cluster.on("POST", "/qres-search-log/_doc", denied, status=403)
    backend = cluster.backend()
    with pytest.raises(BackendError) as caught:
        backend.log_search({"query": "usb"})
    message = one_sentence(caught.value)
    assert message.startswith(
        f"the Elasticsearch user may not do this on qres-search-log at {URL} "
    )
    assert message.endswith("grant it the privileges on qres-search-log* or use another user")
    assert "qres-questions" not in message
    backend.close()


# -- settings ----------------------------------------------------------------------------------


def test_settings_come_from_env_then_file(monkeypatch, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "es.json").write_text(
        json.dumps({"url": "http://file.test:9200", "user": "reader", "password": "from-file"})
    )
    config = load_config()
    assert (config.url, config.user, config.password) == (
        "http://file.test:9200",
        "reader",
        "from-file",
    )
    assert config.config_file == str(home / "es.json")
    monkeypatch.setenv("QRES_ES_URL", "https://env.test:9200")
    monkeypatch.setenv("QRES_ES_API_KEY", "a2V5OnNlY3JldA==")
    config = load_config()
    assert config.url == "https://env.test:9200" and config.auth_summary() == "API key ****"
    assert load_config("http://arg.test:9200").url == "http://arg.test:9200"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "unreadable Elasticsearch settings"),
        ('{"url": "http://x:9200", "pasword": "x"}', "unknown key(s) pasword"),
        ('["http://x:9200"]', "expected a JSON object"),
        ('{"url": "http://x:9200", "password": 1234}', "password must be string(s)"),
    ],
)
def test_bad_config_file(tmp_path, content, problem):
    path = tmp_path / "home" / "es.json"
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(BackendError, match="^" + str(path) + ": ") as caught:
        load_config()
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"QRES_ES_URL": "localhost:9200"}, "is not an http(s) URL: set QRES_ES_URL like"),
        ({"QRES_ES_USER": "elastic"}, "QRES_ES_USER is set ('elastic') but no password"),
        ({"QRES_ES_CA_CERT": "/nonexistent/ca.crt"}, "CA certificate /nonexistent/ca.crt"),
        ({"QRES_ES_TIMEOUT": "soon"}, "is not a number of seconds"),
    ],
)
def test_bad_settings(monkeypatch, env, problem):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(BackendError) as caught:
        EsBackend()
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_bad_index_settings():
    cluster = FakeCluster()
    with pytest.raises(BackendError, match="^title_boost must be a number"):
        cluster.backend(title_boost="high")
    with pytest.raises(BackendError, match="^unknown analyzer 'french'"):
        cluster.backend(analyzer="french")


def test_secrets_stay_out_of_repr_describe_and_config():
    cluster = FakeCluster().on("GET", "/qres-questions/_mapping", mapping(dims=4))
    cluster.on("GET", "/", {"cluster_name": "qres", "version": {"number": "8.19.3"}})
    cluster.on("POST", "/qres-questions/_count", {"count": 5})
    versions = {"indices": [{"name": "qres-questions-v1", "aliases": ["qres-questions"]}]}
    cluster.on("GET", "/_resolve/index/qres-questions-v\\*", versions)
    alias = {"aliases": [{"name": "qres-questions", "indices": ["qres-questions-v1"]}]}
    cluster.on("GET", "/_resolve/index/qres-questions", alias)
    config = EsConfig(url=f"http://u:{PASSWORD}@es.test:9200", user="elastic", password=PASSWORD)
    backend = cluster.backend(config)
    described = backend.describe()
    assert described["url"] == "http://***@es.test:9200"
    assert described["auth"] == "basic (user 'elastic', password ****)"
    assert (described["server_version"], described["documents"], described["vector_dim"]) == (
        "8.19.3",
        5,
        4,
    )
    for text in (json.dumps(described), repr(backend), repr(config)):
        assert PASSWORD not in text
    key_config = EsConfig(url=URL, api_key="a2V5OnNlY3JldA==")
    assert "a2V5OnNlY3JldA" not in repr(key_config) + key_config.auth_summary()
    backend.close()


# -- Kibana ------------------------------------------------------------------------------------

CONFIG = EsConfig(url=URL, user="elastic", password=PASSWORD)


def test_kibana_connection_refused_is_real():
    url = f"http://127.0.0.1:{unused_port()}"
    with pytest.raises(KibanaError) as caught:
        import_saved_objects(url, b"{}\n", CONFIG)
    assert one_sentence(caught.value, url=url) == (
        f"cannot reach Kibana at {url} (connection refused): start it (`docker compose up -d`) "
        "or pass --kibana-url / set QRES_KIBANA_URL"
    )


@pytest.mark.parametrize(
    ("status", "body", "start"),
    [
        (
            401,
            {"message": "Unauthorized"},
            "Kibana at http://kb.test:5601 rejected the credentials",
        ),
        (403, {"message": "forbidden"}, "Kibana at http://kb.test:5601 refused the import"),
        (404, {}, "http://kb.test:5601 has no saved-objects API (HTTP 404)"),
        (503, {}, "Kibana at http://kb.test:5601 is not ready yet"),
        (500, {"message": "boom"}, "Kibana at http://kb.test:5601 answered HTTP 500 (boom)"),
        (
            200,
            {
                "success": False,
                "successCount": 5,
                "errors": [{"id": "qres", "type": "dashboard", "error": {"type": "unknown"}}],
            },
            "Kibana at http://kb.test:5601 imported 5 objects but refused 1: dashboard qres",
        ),
    ],
)
def test_kibana_answers(status, body, start):
    with pytest.raises(KibanaError) as caught:
        import_saved_objects(
            "http://kb.test:5601", b"{}\n", CONFIG, http=RecordingHttp(status, body)
        )
    assert one_sentence(caught.value, url="http://kb.test:5601").startswith(start)


def test_kibana_setup_command_prints_one_error_line(monkeypatch):
    url = f"http://127.0.0.1:{unused_port()}"
    result = CliRunner().invoke(cli, ["kibana-setup", "--kibana-url", url])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: cannot reach Kibana at {url} (connection refused)")
    assert "Traceback" not in result.output and result.output.count("\n") == 1
    monkeypatch.setenv("QRES_KIBANA_URL", "kibana.local")
    result = CliRunner().invoke(cli, ["kibana-setup"])
    assert "Kibana URL 'kibana.local' is not an http(s) URL" in result.output
