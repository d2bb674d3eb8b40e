"""The service's group-commit writer and search log, without HTTP."""

from __future__ import annotations

import threading

import pytest

from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import Question
from qres.indexing.group_commit import Delete, GroupCommitWriter, Upsert


class RecordingBackend:
    """Records what the writer does; the first commit waits for ``release``."""

    name = "recording"

    def __init__(self, fail_on: str | None = None):
        self.calls: list = []
        self.release = threading.Event()
        self.committing = threading.Event()
        self.fail_on = fail_on

    def upsert(self, questions, vectors=None):
        if self.fail_on in [q.id for q in questions]:
            raise RuntimeError("disk full")
        self.calls.append(("upsert", [q.id for q in questions]))

    def delete(self, ids):
        self.calls.append(("delete", list(ids)))

    def commit(self):
        self.committing.set()
        self.release.wait(10)
        self.calls.append(("commit",))

    def rollback(self):
        self.calls.append(("rollback",))


def upsert(*ids):
    return Upsert([Question(i, f"title {i}", "") for i in ids], None)


def test_a_write_is_acknowledged_after_its_commit_and_waiting_writes_share_one():
    backend = RecordingBackend()
    writer = GroupCommitWriter(backend)
    first = writer.submit(upsert("a"))
    assert backend.committing.wait(10)  # the writer is inside the first commit
    second, third = writer.submit(upsert("b")), writer.submit(Delete(["a"]))
    assert not first.done() and not second.done()  # nothing acknowledged before its commit
    backend.release.set()
    first.result(10), second.result(10), third.result(10)
    writer.close()
    assert backend.calls == [
        ("upsert", ["a"]),
        ("commit",),
        ("upsert", ["b"]),
        ("delete", ["a"]),
        ("commit",),
    ]


def test_a_failed_group_is_rolled_back_and_reported_and_the_writer_goes_on():
    backend = RecordingBackend(fail_on="bad")
    backend.release.set()
    writer = GroupCommitWriter(backend)
    with pytest.raises(RuntimeError, match="disk full"):
        writer.submit(upsert("bad")).result(10)
    writer.submit(upsert("good")).result(10)
    writer.close()
    assert backend.calls == [("rollback",), ("upsert", ["good"]), ("commit",)]


def test_close_commits_what_is_queued(tmp_path):
    with EmbeddedBackend(tmp_path / "index", create=True) as backend:
        writer = GroupCommitWriter(backend, max_batch=2)
        futures = [writer.submit(upsert(f"q{i}")) for i in range(5)]
        writer.close()
        assert all(f.done() and f.exception() is None for f in futures)
        assert backend.count() == 5


def test_log_queries_records_each_service_search(tmp_path, monkeypatch):
    """--log-queries: the service hands each search to the backend's search log (the
    Elasticsearch backend writes it to qres-search-log), as `qres search --log-queries` does."""
    import asyncio

    import httpx

    from qres.service import app as service
    from qres.service import state
    from tests.serving import build_demo_index

    logged = []

    class LoggingBackend(EmbeddedBackend):
        keeps_search_log = True

        def log_search(self, record):
            logged.append(record)

    index = build_demo_index(tmp_path / "index")
    monkeypatch.setattr(state, "open_backend", lambda _name, path: LoggingBackend(path))
    config = service.ServiceConfig(index_dir=str(index), log_queries=True)
    app = service.create_app(config)

    async def search():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://qres") as http:
            return await http.get("/search", params={"q": "boot ubuntu from usb", "k": 3})

    assert asyncio.run(search()).status_code == 200
    app.state.service.close()
    assert len(logged) == 1
    record = logged[0]
    assert record["query"] == "boot ubuntu from usb" and record["mode"] == "hybrid"
    assert record["k"] == 3 and record["top_ids"][0] == "d128"
    assert record["result_count"] == 3 and record["latency_ms"] > 0


def test_log_queries_needs_elasticsearch(run, tmp_path):
    from tests.serving import build_demo_index

    index = build_demo_index(tmp_path / "index")
    result = run("--index-dir", index, "serve", "--log-queries")
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: --log-queries needs the Elasticsearch backend (--backend elasticsearch)"
    )
