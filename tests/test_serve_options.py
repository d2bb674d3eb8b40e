"""`qres serve`'s safety options: open writes only on loopback, what start-up says."""

from __future__ import annotations

import pytest

from qres.service.config import CONFIG_ENV, ServiceConfig, check_open_writes, startup_notes


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "forum.example.org", "::"])
def test_open_writes_is_refused_off_loopback(run, host):
    result = run("serve", "--open-writes", "--host", host)
    assert result.exit_code == 1
    assert result.output.startswith(f"error: --open-writes lets anyone who reaches {host}")
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_open_writes_is_allowed_on_loopback(host):
    check_open_writes(host)  # no error


def test_a_question_url_needs_the_id_placeholder(run):
    result = run("serve", "--question-url", "https://forum.example.org/q/")
    assert result.exit_code == 2 and "{id}" in result.output


def test_start_up_says_who_may_write_and_what_is_logged(monkeypatch):
    config = ServiceConfig(index_dir="ix")
    monkeypatch.delenv("QRES_API_KEY", raising=False)
    writes, logged = startup_notes(config, access_log=True)
    assert writes.startswith("writes are off") and "QRES_API_KEY" in writes
    assert "query texts included" in logged and "--no-access-log" in logged
    config.open_writes = True
    assert startup_notes(config, access_log=False) == [
        "writes are open to anyone who can reach this address (--open-writes)",
        "the access log is off: query texts are not logged",
    ]
    monkeypatch.setenv("QRES_API_KEY", "k")
    assert startup_notes(config, access_log=True)[0].startswith("writes need the API key")
    # several workers over an embedded index refuse every write: said so, key or not
    assert startup_notes(config, access_log=True, read_only=True)[0] == (
        "writes are off: an embedded index takes writes with --workers 1 only"
    )


@pytest.mark.parametrize(("option", "value"), [("--candidates", "0"), ("--dense-candidates", "-1")])
def test_serve_checks_the_candidate_counts_as_search_does(run, option, value):
    result = run("serve", option, value)
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output


def test_serve_hands_dense_candidates_to_the_search_pipeline(tmp_path):
    from qres.service.state import Service
    from tests.serving import build_demo_index

    index = build_demo_index(tmp_path / "index")
    service = Service(ServiceConfig(index_dir=str(index), dense_candidates=7))
    try:
        assert service.pipeline.dense_candidates == 7
    finally:
        service.close()


def test_a_busy_port_is_said_in_one_line_before_the_index_is_opened(run, tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--port", port, "--index-dir", tmp_path / "no-index-here")
    assert result.exit_code == 1
    assert result.output.startswith(f"error: cannot listen on 127.0.0.1:{port}: ")
    assert "--port" in result.output and len(result.output.strip().splitlines()) == 1


def test_serve_device_reaches_the_workers_search_pipeline(tmp_path, monkeypatch):
    from qres.ranking.search import SearchPipeline
    from qres.service.state import Service
    from tests.serving import build_demo_index

    index = build_demo_index(tmp_path / "index")
    asked = []
    for_index = SearchPipeline.for_index.__func__

    def recording(cls, *args, **options):
        asked.append(options.get("device"))
        return for_index(cls, *args, **options)

    monkeypatch.setattr(SearchPipeline, "for_index", classmethod(recording))
    # as `qres serve --device cpu` hands it to a worker, through the environment
    monkeypatch.setenv(CONFIG_ENV, ServiceConfig(index_dir=str(index), device="cpu").to_env())
    Service(ServiceConfig.from_env()).close()
    assert asked == ["cpu"]
