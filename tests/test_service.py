"""`qres serve` over HTTP: a real server process on a loopback port, a real HTTP client."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from qres.backends.base import BackendError
from tests.serving import Server, build_demo_index

KEY = {"QRES_API_KEY": "test-key"}  # writes are refused without one
KEY_HEADER = {"X-API-Key": "test-key"}


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory):
    return build_demo_index(tmp_path_factory.mktemp("serve") / "index")


@pytest.fixture(scope="module")
def server(demo_index, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-log") / "server.log"
    with Server(demo_index, env=KEY, log=log) as running:
        yield running
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=30, headers=KEY_HEADER) as http:
        yield http


def search_ids(client, text, **params) -> list[str]:
    answer = client.get("/search", params={"q": text, "k": 10, **params})
    assert answer.status_code == 200, answer.text
    return [hit["id"] for hit in answer.json()["results"]]


# -- searching ---------------------------------------------------------------------------------


def test_search_finds_the_duplicate_with_titles_and_latency(client):
    answer = client.get("/search", params={"q": "boot ubuntu from usb", "k": 3})
    assert answer.status_code == 200
    body = answer.json()
    assert body["mode"] == "hybrid" and body["k"] == 3 and body["latency_ms"] > 0
    assert [h["rank"] for h in body["results"]] == [1, 2, 3]
    top = body["results"][0]
    assert top["id"] == "d128" and top["title"] == "How do I boot Ubuntu from a USB stick?"
    shown = {"rank", "id", "title", "score", "tags", "snippet", "answer_count", "extras"}
    assert set(top) == shown  # no explain: no signals
    assert top["tags"] and top["snippet"]
    assert top["answer_count"] is None and top["extras"] == {}  # the demo forum has no counts


def test_explain_gives_each_signal_and_modes_differ(client):
    hits = client.get(
        "/search", params={"q": "boot ubuntu from usb", "explain": "true", "mode": "hybrid"}
    ).json()["results"]
    assert all(isinstance(h["bm25"], float) and isinstance(h["cosine"], float) for h in hits)
    bm25 = client.get("/search", params={"q": "boot ubuntu from usb", "mode": "bm25"}).json()
    assert bm25["mode"] == "bm25"
    scores = [h["score"] for h in bm25["results"]]
    assert scores == sorted(scores, reverse=True) and scores[0] == max(h["bm25"] for h in hits)


def test_a_title_being_typed_is_searched_with_its_last_word_completed(client):
    typed = client.get("/search", params={"q": "boot ubuntu from us", "typing": "true"}).json()
    assert typed["query"] == "boot ubuntu from us" and typed["searched"] == "boot ubuntu from usb"
    assert typed["results"][0]["id"] == "d128"
    done = client.get("/search", params={"q": "boot ubuntu from usb"}).json()
    assert [h["id"] for h in typed["results"]] == [h["id"] for h in done["results"]]
    as_typed = client.get("/search", params={"q": "boot ubuntu from us"}).json()
    assert as_typed["searched"] == "boot ubuntu from us"


def test_post_search_takes_title_and_body(client):
    answer = client.post(
        "/search",
        json={"title": "start the installer from a stick", "body": "usb boot iso", "k": 5},
    )
    assert answer.status_code == 200, answer.text
    assert "d128" in [h["id"] for h in answer.json()["results"]]


def test_a_query_without_searchable_words_has_no_results(client):
    answer = client.get("/search", params={"q": "the of and"})
    assert answer.status_code == 200 and answer.json()["results"] == []


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "says"),
    [
        ("GET", "/search", {"params": {"q": "  "}}, 400, "empty"),
        ("GET", "/search", {"params": {}}, 400, "q is required"),
        ("GET", "/search", {"params": {"q": "x" * 2001}}, 400, "longer than 2000"),
        ("POST", "/search", {"json": {"title": "x" * 2001}}, 400, "the title is longer than 2000"),
        ("GET", "/search", {"params": {"q": "usb", "k": 0}}, 400, "k:"),
        ("GET", "/search", {"params": {"q": "usb", "k": -1}}, 400, "greater than or equal to 1"),
        ("GET", "/search", {"params": {"q": "usb", "k": "--1"}}, 400, "k: must be a whole number"),
        ("GET", "/search", {"params": {"q": "usb", "k": 101}}, 400, "k:"),
        ("GET", "/search", {"params": {"q": "usb", "k": "ten"}}, 400, "k:"),
        ("GET", "/search", {"params": {"q": "usb", "mode": "magic"}}, 400, "mode:"),
        ("POST", "/search", {"content": b'{"title": "usb",'}, 400, "not valid JSON"),
        ("POST", "/search", {"json": [1, 2]}, 400, "JSON object"),
        ("POST", "/search", {"json": {"title": "usb", "k": 500}}, 400, "at most 100"),
        ("POST", "/search", {"json": {"title": "usb", "colour": 1}}, 400, "colour"),
        ("GET", "/questions/nope", {}, 404, "no question with id 'nope'"),
        ("DELETE", "/questions/nope", {}, 404, "no question with id 'nope'"),
        ("PUT", "/questions/q1", {"json": {"body": "no title"}}, 400, "title is required"),
        ("PUT", "/questions/q1", {"json": {"title": " ", "body": ""}}, 400, "empty title"),
        (
            "POST",
            "/questions",
            {"content": b'{"id": "a", "title": "t"}\n{"id": "b"}\n'},
            400,
            "line 2: title is required",
        ),
        (
            "POST",
            "/questions",
            {"content": b'{"id": "a", "title": "t"}\nnot json\n'},
            400,
            "line 2: the line is not valid JSON",
        ),
        ("POST", "/questions", {"content": b"\n\n"}, 400, "no questions"),
        (
            "PUT",
            "/questions/q1",
            {"json": {"title": "t", "extras": {"answer_count": "lots"}}},
            400,
            "extras: 'answer_count': 'lots' is not a whole number",
        ),
        (
            "POST",
            "/questions",
            {"content": b'{"id": "a", "title": "t"}\n{"id": "b", "title": "t", "extras": 3}\n'},
            400,
            "line 2: extras: input should be an object",
        ),
        ("POST", "/questions", {"content": b"x" * (4 * 1024 * 1024 + 1)}, 413, "larger than"),
        ("GET", "/nowhere", {}, 404, "no such endpoint"),
        ("PATCH", "/search", {}, 405, "not allowed"),
        # issue 34: k is a whole number, not true or 3.0; an id is at most 512 bytes (here
        # 300 characters of 2 bytes each), as in the corpus readers and the backends
        ("POST", "/search", {"json": {"title": "usb", "k": True}}, 400, "k: input should be"),
        ("GET", "/search", {"params": {"q": "usb", "k": "5.0"}}, 400, "k: must be a whole number"),
        ("POST", "/search", {"json": {"title": "usb", "k": 3.0}}, 400, "k: input should be"),
        ("PUT", "/questions/" + "é" * 300, {"json": {"title": "t"}}, 400, "1 to 512 bytes"),
        # %ff and %fe would both decode to U+FFFD: two ids written as one question
        ("PUT", "/questions/%ff", {"json": {"title": "t"}}, 400, "not valid UTF-8"),
        ("GET", "/questions/%fe", {}, 400, "not valid UTF-8"),
        ("DELETE", "/questions/a%ff", {}, 400, "not valid UTF-8"),
        # a newline in an id matched no route ("no such endpoint: PUT /questions/ab", 404)
        ("PUT", "/questions/a%0Ab", {"json": {"title": "t"}}, 400, "without control characters"),
        ("GET", "/questions/a%0Ab", {}, 400, "without control characters"),
        ("DELETE", "/questions/a%0Ab", {}, 400, "without control characters"),
        (
            "POST",
            "/questions",
            {"content": json.dumps({"id": "é" * 300, "title": "t"}).encode()},
            400,
            "line 1: id: a question id is 1 to 512 bytes",
        ),
    ],
)
def test_bad_requests_get_a_one_sentence_json_error(client, method, path, kwargs, status, says):
    answer = client.request(method, path, **kwargs)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    error = answer.json()["error"]
    assert says in error and error.endswith(".") and "\n" not in error
    assert "Traceback" not in answer.text


def test_a_streamed_body_over_the_cap_is_refused_too(client):
    def chunks():
        for _ in range(5):
            yield b"x" * (1024 * 1024)

    answer = client.post("/questions", content=chunks())  # chunked: no Content-Length
    assert answer.status_code == 413 and "larger than" in answer.json()["error"]


# -- writing -----------------------------------------------------------------------------------


def test_an_id_with_a_slash_is_written_read_and_deleted_by_its_url(client):
    url = "/questions/forum%2F42"  # the id "forum/42", its slash encoded or not
    answer = client.put(url, json={"title": "wombat codec stutters", "body": ""})
    assert answer.status_code == 200 and answer.json()["id"] == "forum/42"
    assert client.get("/questions/forum/42").json()["title"] == "wombat codec stutters"
    assert search_ids(client, "wombat codec")[0] == "forum/42"
    assert client.delete(url).status_code == 200
    assert client.get(url).status_code == 404


def test_an_id_that_is_not_utf8_is_refused_and_one_that_is_works(client):
    for url in ("/questions/%ff", "/questions/%fe"):
        answer = client.put(url, json={"title": "wombat firmware"})
        assert answer.json() == {"error": "the question id is not valid UTF-8 once %-decoded."}
    assert client.get("/questions/%EF%BF%BD").status_code == 404  # nothing written as U+FFFD
    url = "/questions/caf%C3%A9"  # the id "café"
    answer = client.put(url, json={"title": "wombat firmware", "body": ""})
    assert answer.status_code == 200 and answer.json()["id"] == "café"
    assert client.get("/questions/café").json()["title"] == "wombat firmware"
    assert client.delete(url).status_code == 200


def test_put_is_searchable_when_acknowledged_then_delete_removes_it(client):
    question = {"title": "quokka screensaver freezes gnome", "body": "the quokka one", "tags": []}
    answer = client.put("/questions/w1", json=question)
    assert answer.status_code == 200 and answer.json() == {"id": "w1", "committed": True}
    assert search_ids(client, "quokka screensaver")[0] == "w1"
    assert client.get("/questions/w1").json()["title"] == question["title"]
    # replacing keeps one copy, with the new text
    client.put("/questions/w1", json={"title": "quokka wallpaper", "body": ""})
    assert search_ids(client, "quokka").count("w1") == 1
    assert search_ids(client, "screensaver freezes", mode="bm25").count("w1") == 0
    answer = client.delete("/questions/w1")
    assert answer.status_code == 200 and answer.json()["deleted"] is True
    assert "w1" not in search_ids(client, "quokka wallpaper")
    assert client.get("/questions/w1").status_code == 404


def test_put_and_post_store_an_html_body_as_its_text(client):
    html = "<!-- imported --><p>The numbat driver &amp; its <code>dkms</code> build</p>"
    answer = client.put("/questions/h1", json={"title": "numbat driver", "body": html})
    assert answer.status_code == 200
    line = json.dumps({"id": "h2", "title": "numbat build", "body": html}).encode()
    assert client.post("/questions", content=line).status_code == 200
    for qid in ("h1", "h2"):
        stored = client.get(f"/questions/{qid}").json()["body"]
        assert stored == "The numbat driver & its dkms build"
        client.delete(f"/questions/{qid}")
    # an HTML body holding no text is an empty body
    answer = client.put("/questions/h3", json={"title": "", "body": "<p> </p>"})
    assert answer.status_code == 400
    assert answer.json() == {"error": "the question has an empty title and body."}


def test_a_whole_question_longer_than_a_query_is_searched(client):
    body = "I downloaded the installer and want to boot it from a usb stick. " * 40
    answer = client.post("/search", json={"title": "usb boot", "body": body, "k": 1})
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["results"]) == 1
    # a null body is none, as a write takes it (it was "body: input should be a valid string")
    none = client.post("/search", json={"title": "usb boot", "body": None, "k": 1})
    assert none.status_code == 200, none.text
    assert (
        none.json()["results"]
        == client.post("/search", json={"title": "usb boot", "k": 1}).json()["results"]
    )


def test_a_padded_id_in_the_path_is_the_id_a_batch_or_a_corpus_gives(client):
    assert client.put("/questions/%20pad%20", json={"title": "numbat pad"}).json()["id"] == "pad"
    line = json.dumps({"id": " pad ", "title": "numbat pad, posted"}).encode()
    assert client.post("/questions", content=line).status_code == 200
    assert client.get("/questions/pad").json()["title"] == "numbat pad, posted"  # one question
    assert client.get("/questions/%20pad").json()["id"] == "pad"
    assert client.delete("/questions/pad%20").json()["deleted"] is True


def test_a_bad_field_named_body_is_named(client):
    answer = client.put("/questions/b1", json={"title": "numbat", "body": 5})
    assert answer.json() == {"error": "body: input should be a valid string."}
    answer = client.get("/search", params={"q": "numbat", "k": "many"})
    assert answer.json()["error"].startswith("k: ")


def test_written_extras_come_back_with_searches_and_the_question(client):
    extras = {"answer_count": 4, "score": 7, "closed_date": "2013-05-01T10:00:00.000"}
    lines = b"\n".join(
        [
            b'{"id": "e1", "title": "pangolin keyboard layout", "extras": %s}'
            % json.dumps(extras).encode(),
            b'{"id": "e2", "title": "pangolin mouse layout"}',
        ]
    )
    assert client.post("/questions", content=lines).status_code == 200
    hits = client.get("/search", params={"q": "pangolin layout", "k": 2}).json()["results"]
    shown = {h["id"]: (h["answer_count"], h["extras"]) for h in hits}
    assert shown == {"e1": (4, extras), "e2": (None, {})}
    assert client.get("/questions/e1").json()["extras"] == extras
    client.put("/questions/e1", json={"title": "pangolin keyboard layout", "extras": {}})
    assert client.get("/questions/e1").json()["extras"] == {}  # replaced whole
    for qid in ("e1", "e2"):
        client.delete(f"/questions/{qid}")


def test_a_question_written_as_a_closed_duplicate_leads_searches_to_its_original(client):
    lines = [
        {"id": "o1", "title": "narwhal tusk polishing", "body": "how do I polish it"},
        {"id": "d1", "title": "okapi stripes fading", "extras": {"duplicate_of": "o1"}},
    ]
    content = "\n".join(json.dumps(line) for line in lines).encode()
    assert client.post("/questions", content=content).status_code == 200
    hits = client.get("/search", params={"q": "okapi stripes fading", "k": 3}).json()["results"]
    assert (hits[0]["id"], hits[0]["via"]) == ("o1", "d1")  # d1 matched; o1 has the answers
    assert "d1" not in [h["id"] for h in hits]
    for qid in ("o1", "d1"):
        client.delete(f"/questions/{qid}")


def test_batch_of_json_lines(client):
    lines = b"\n".join(
        [
            b'{"id": "b1", "title": "axolotl driver crashes on resume", "tags": ["suspend"]}',
            b'{"id": "b2", "title": "axolotl printer offline", "body": "cups says offline"}',
            b"",
        ]
    )
    answer = client.post("/questions", content=lines)
    assert answer.status_code == 200 and answer.json()["upserted"] == 2
    assert set(search_ids(client, "axolotl")[:2]) == {"b1", "b2"}
    assert client.get("/questions/b1").json()["tags"] == ["suspend"]


def test_health_readiness_and_metrics(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["questions"] >= 330 and ready["writes"] is True
    client.get("/search", params={"q": "wifi driver", "mode": "dense"})
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert 'qres_search_seconds_bucket{le="0.05",mode="dense"}' in text
    assert 'qres_http_requests_total{method="GET",route="/search",status="200"}' in text
    count = client.get("/readyz").json()["questions"]
    assert f"qres_index_questions {float(count)}" in text


def test_head_answers_as_get_without_a_body(client):
    query = {"q": "boot ubuntu from usb"}
    answer = client.head("/search", params=query)
    assert answer.status_code == 200 and answer.content == b""
    assert (
        answer.headers["content-type"]
        == client.get("/search", params=query).headers["content-type"]
    )
    for path in ("/healthz", "/readyz", "/metrics", "/questions/d128", "/", "/widget.js", "/docs"):
        assert client.head(path).status_code == 200, path
    assert client.head("/questions").status_code == 405  # POST only: no GET, no HEAD


@pytest.mark.parametrize(
    "method, path, allowed",
    [
        ("DELETE", "/search", "GET, HEAD, POST"),
        ("PUT", "/healthz", "GET, HEAD"),
        ("PATCH", "/questions/d128", "DELETE, GET, HEAD, PUT"),
    ],
)
def test_a_method_not_allowed_names_every_method_the_path_takes(client, method, path, allowed):
    answer = client.request(method, path)
    assert answer.status_code == 405 and answer.headers["allow"] == allowed
    assert answer.json() == {"error": f"{method} is not allowed on {path}."}


def test_openapi_docs(client):
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/search", "/questions", "/questions/{qid}", "/readyz"} <= set(paths)


def test_demo_page_and_widget_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and 'src="/widget.js"' in page.text
    widget = client.get("/widget.js")
    assert widget.headers["content-type"].startswith("text/javascript")
    assert "AbortController" in widget.text


def test_eight_searchers_and_a_writer_make_no_errors(server):
    """8 clients search while one writes for a bounded time; every acknowledged write is
    searchable afterwards."""
    errors, searches, acknowledged = [], [0], []
    stop = time.monotonic() + 4

    def searcher(n):
        with httpx.Client(base_url=server.url, timeout=30) as http:
            queries = ["boot ubuntu from usb", "wifi driver missing", "hdmi sound", "grub"]
            while time.monotonic() < stop:
                answer = http.get("/search", params={"q": queries[n % 4], "k": 10})
                if answer.status_code != 200 or not answer.json()["results"]:
                    errors.append(answer.text)
                searches[0] += 1

    def writer():
        with httpx.Client(base_url=server.url, timeout=30, headers=KEY_HEADER) as http:
            i = 0
            while time.monotonic() < stop:
                qid = f"c{i}"
                answer = http.put(f"/questions/{qid}", json={"title": f"concurrency{i} marker"})
                if answer.status_code == 200:
                    acknowledged.append(qid)
                    # acknowledged means committed: searchable at once
                    found = search_ids(http, f"concurrency{i}", mode="bm25")[:1]
                    if found != [qid]:
                        errors.append(f"{qid} not found right after its acknowledgement")
                else:
                    errors.append(answer.text)
                i += 1

    threads = [threading.Thread(target=searcher, args=(n,)) for n in range(8)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert searches[0] >= 8 and len(acknowledged) >= 1
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for qid in acknowledged:
            i = qid[1:]
            hits = http.get("/search", params={"q": f"concurrency{i}", "mode": "bm25"}).json()
            assert hits["results"][0]["id"] == qid


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_unending_request_headers_are_refused_without_holding_them(server):
    """Four connections each send 4 MB of one header that never ends (issue 34: each used to
    be held whole, 100 MB apiece, for ever): each is answered 431 and closed after 64 KB,
    the server's memory does not grow by what they sent, and it goes on answering."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /search?q=usb HTTP/1.1\r\nHost: qres\r\nX-Big: " + b"a" * 70_000)
        answer = s.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ") and b"application/json" in head, answer
    assert "headers are larger than 65536 bytes" in json.loads(body)["error"]
    # a request line that long, sent whole: the parser gave up first ("not valid HTTP", 400)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /search?q=" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: qres\r\n\r\n")
        answer = s.recv(65536)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]

    before = rss_bytes(server.process.pid)
    sockets = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(4)]
    for s in sockets:
        s.sendall(b"GET / HTTP/1.1\r\nHost: qres\r\nX-Big: ")
        with contextlib.suppress(OSError):  # refused and closed by the server on the way
            for _ in range(64):
                s.sendall(b"a" * 65536)
    time.sleep(0.5)
    grown = rss_bytes(server.process.pid) - before
    for s in sockets:
        s.close()
    assert grown < 8 * 2**20, f"the server grew by {grown / 2**20:.1f} MB"  # 16 MB were sent
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200


@pytest.fixture
def guarded_server(monkeypatch):
    """uvicorn with qres serve's protocol in this process (header time cut to 0.5 s), over
    an app that answers "ok"."""
    import uvicorn

    from qres.service import protocol
    from tests.serving import free_port

    monkeypatch.setattr(protocol, "HEADER_SECONDS", 0.5)

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    config = uvicorn.Config(
        app, port=free_port(), http=protocol.GuardedHttpTools, lifespan="off", log_level="error"
    )
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not running.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield config.port
    running.should_exit = True
    thread.join(10)


def exchange(port: int, data: bytes, pause: float = 0.0) -> tuple[bytes, float]:
    """Send ``data`` (then wait ``pause`` s), read until the server closes; the answer and
    the seconds it took."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        time.sleep(pause)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks), time.monotonic() - started


def test_headers_that_take_too_long_get_a_json_408_and_silence_is_closed(guarded_server):
    answer, seconds = exchange(guarded_server, b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    assert answer.startswith(b"HTTP/1.1 408 ") and 0.4 < seconds < 5, (answer, seconds)
    assert "took longer than" in json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    answer, seconds = exchange(guarded_server, b"")  # a connection that says nothing
    assert answer == b"" and 0.4 < seconds < 5
    answer, _ = exchange(guarded_server, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and b"\r\nok\r\n" in answer


def test_uvicorns_own_errors_are_one_sentence_of_json(guarded_server):
    answer, _ = exchange(guarded_server, b"\x16\x03\x01 not http at all\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head
    assert json.loads(body) == {"error": "the request is not valid HTTP."}


# -- durability, auth, CORS, workers: their own servers ----------------------------------------


def test_an_acknowledged_write_survives_kill_9(tmp_path):
    index = build_demo_index(tmp_path / "index")
    server = Server(index, env=KEY, log=tmp_path / "server.log").start()
    try:
        with httpx.Client(base_url=server.url, timeout=30, headers=KEY_HEADER) as http:
            answer = http.put("/questions/k9", json={"title": "narwhal kernel panic on boot"})
            assert answer.status_code == 200
            server.kill()  # right after the acknowledgement: no shutdown, no flush
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert search_ids(http, "narwhal kernel panic")[0] == "k9"
            assert http.get("/readyz").json()["questions"] == 331
    finally:
        server.stop()


def test_api_key_guards_writes_and_is_never_logged(tmp_path):
    index = build_demo_index(tmp_path / "index")
    key = "s3cret-key-for-the-test"
    log = tmp_path / "server.log"
    with Server(index, env={"QRES_API_KEY": key}, log=log) as server:
        http = httpx.Client(base_url=server.url, timeout=30)
        put = {"json": {"title": "okapi audio crackles"}}
        missing = http.put("/questions/a1", **put)
        assert missing.status_code == 401 and "API key" in missing.json()["error"]
        wrong = http.put("/questions/a1", headers={"X-API-Key": "nope"}, **put)
        assert wrong.status_code == 401
        assert http.delete("/questions/d128").status_code == 401
        assert http.post("/questions", content=b'{"id": "x", "title": "y"}').status_code == 401
        assert http.put("/questions/a1", headers={"X-API-Key": key}, **put).status_code == 200
        bearer = {"Authorization": f"Bearer {key}"}
        assert http.put("/questions/a2", headers=bearer, **put).status_code == 200
        assert http.get("/search", params={"q": "okapi"}).status_code == 200  # reads are open
    assert key not in log.read_text()


def test_cors_allows_only_the_configured_origin(tmp_path):
    index = build_demo_index(tmp_path / "index")
    origin = "https://forum.example.org"
    with Server(index, "--cors-origin", origin, log=tmp_path / "server.log") as server:
        preflight = {"Access-Control-Request-Method": "GET"}
        allowed = httpx.options(
            f"{server.url}/search", headers={"Origin": origin, **preflight}, timeout=30
        )
        assert allowed.headers.get("access-control-allow-origin") == origin
        other = httpx.get(
            f"{server.url}/search",
            params={"q": "usb"},
            headers={"Origin": "https://evil.example"},
            timeout=30,
        )
        assert "access-control-allow-origin" not in other.headers
        for headers, refused in (
            ({"Origin": "https://evil.example", **preflight}, "origin"),
            ({"Origin": origin, "Access-Control-Request-Method": "PUT"}, "method"),
        ):
            answer = httpx.options(f"{server.url}/search", headers=headers, timeout=30)
            assert answer.status_code == 400  # one sentence of JSON, like every other 4xx
            assert answer.json() == {
                "error": f"the cross-origin request is not allowed: its {refused} is not one "
                "served."
            }


def test_several_workers_search_and_refuse_writes_on_an_embedded_index(tmp_path):
    index = build_demo_index(tmp_path / "index")
    with Server(index, "--workers", "2", env=KEY, log=tmp_path / "server.log") as server:
        http = httpx.Client(base_url=server.url, timeout=30, headers=KEY_HEADER)
        for _ in range(6):
            assert search_ids(http, "boot ubuntu from usb")[0] == "d128"
        refused = http.put("/questions/z", json={"title": "t"})
        assert refused.status_code == 503 and "--workers 1" in refused.json()["error"]
        metrics = http.get("/metrics").text  # summed over the workers
        assert 'qres_search_seconds_count{mode="hybrid"} 6.0' in metrics


def test_serve_on_a_missing_index_is_one_line(run, tmp_path):
    result = run("--index-dir", tmp_path / "none", "serve")
    assert result.exit_code == 1
    assert result.output.strip().startswith("error: no qres index at")
    assert len(result.output.strip().splitlines()) == 1


def test_compose_runs_the_service_next_to_elasticsearch():
    import yaml

    from tests.serving import ROOT

    qres = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["qres"]
    assert qres["build"] == "." and (ROOT / "Dockerfile").is_file()
    assert qres["depends_on"]["elasticsearch"]["condition"] == "service_healthy"
    assert qres["environment"]["QRES_BACKEND"] == "elasticsearch"
    assert qres["ports"] == ["127.0.0.1:${QRES_PORT:-8000}:8000"]
    script = qres["command"][-1]
    assert "exec qres serve --host 0.0.0.0 --port 8000" in script and "--log-queries" in script
    assert "/readyz" in qres["healthcheck"]["test"][-1]


def test_an_index_without_vectors_serves_bm25_and_takes_writes(tmp_path):
    """In-process (ASGI) over a BM25-only index: no model, so no dense or hybrid search."""
    import asyncio

    from qres.backends.embedded import EmbeddedBackend
    from qres.corpus.readers import read_corpus
    from qres.indexing.pipeline import index_questions
    from qres.service import app as service
    from tests.serving import DEMO

    with EmbeddedBackend(tmp_path / "index", create=True) as backend:
        index_questions(backend, read_corpus(DEMO))
    config = service.ServiceConfig(index_dir=str(tmp_path / "index"), open_writes=True)
    app = service.create_app(config)

    async def calls():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://qres") as http:
            default = await http.get("/search", params={"q": "boot ubuntu from usb"})
            hybrid = await http.get("/search", params={"q": "usb", "mode": "hybrid"})
            put = await http.put("/questions/n1", json={"title": "gecko firmware update"})
            found = await http.get("/search", params={"q": "gecko firmware"})
            return default, hybrid, put, found

    default, hybrid, put, found = asyncio.run(calls())
    app.state.service.close()
    assert default.json()["mode"] == "bm25" and default.json()["results"][0]["id"] == "d128"
    assert hybrid.status_code == 400 and "needs an index with vectors" in hybrid.json()["error"]
    assert put.status_code == 200 and found.json()["results"][0]["id"] == "n1"


@pytest.mark.parametrize("at_once", [1, 3])
def test_a_worker_runs_as_many_searches_at_once_as_it_has_cores_the_rest_wait(
    tmp_path, monkeypatch, at_once
):
    import asyncio

    from qres.backends.embedded import EmbeddedBackend
    from qres.corpus.readers import read_corpus
    from qres.indexing.pipeline import index_questions
    from qres.service import app as service
    from qres.service.config import searches_at_once
    from tests.serving import DEMO

    with EmbeddedBackend(tmp_path / "index", create=True) as backend:
        index_questions(backend, read_corpus(DEMO))
    monkeypatch.setenv("QRES_SEARCHES_AT_ONCE", str(at_once))
    app = service.create_app(service.ServiceConfig(index_dir=str(tmp_path / "index")))
    running, most = [0], [0]
    search = app.state.service.search

    def counted(*args):
        running[0] += 1
        most[0] = max(most[0], running[0])
        time.sleep(0.05)
        try:
            return search(*args)
        finally:
            running[0] -= 1

    app.state.service.search = counted

    async def calls():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://qres") as http:
            asked = [http.get("/search", params={"q": f"usb {i}"}) for i in range(8)]
            return await asyncio.gather(*asked)

    answers = asyncio.run(calls())
    app.state.service.close()
    assert all(a.status_code == 200 for a in answers)
    assert most[0] == at_once
    monkeypatch.delenv("QRES_SEARCHES_AT_ONCE")
    assert searches_at_once(workers=64) == 1  # never none
    monkeypatch.setenv("QRES_SEARCHES_AT_ONCE", "0")
    with pytest.raises(BackendError, match="QRES_SEARCHES_AT_ONCE must be a whole number"):
        searches_at_once(workers=1)


def test_a_write_while_another_process_writes_the_index_is_told_to_come_back(tmp_path):
    """A write while `qres index` or `compact` ran beside the server was told "the index is
    unavailable: ... wait for it to end, or stop that server" (the server it was talking to),
    logged at ERROR: now a 503 saying to try again, with Retry-After, and a warning."""
    index = build_demo_index(tmp_path / "index")
    holder = subprocess.Popen(  # what qres index does while it writes: holds the lock
        [
            sys.executable,
            "-c",
            "import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); sys.stdin.read()",
            str(index / "writer.lock"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline() == b"held\n"
        with (
            Server(index, env=KEY, log=tmp_path / "server.log") as running,
            httpx.Client(base_url=running.url, timeout=30, headers=KEY_HEADER) as http,
        ):
            refused = http.put("/questions/w1", json={"title": "wifi drops"})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "10"
            assert refused.json()["error"] == (
                "another qres process (qres index or compact) is writing the index: try "
                "this write again once it ends."
            )
            holder.communicate(b"", timeout=30)  # it ends: the lock is free
            assert http.put("/questions/w1", json={"title": "wifi drops"}).status_code == 200
        log = (tmp_path / "server.log").read_text()
        assert "WARNING: qres" in log and "write refused" in log and "ERROR" not in log, log
    finally:
        holder.kill()
