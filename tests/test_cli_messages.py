"""What the command line says: user text printed as it is, interruptions told truthfully,
``qres info`` showing only what applies to the backend."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from qres.backends.base import BackendError

CORPUS = (
    "id\ttitle\ttext\n".replace("text", "body")
    + "m1\tgrub [fix] [b]menu[/b]\tThe boot menu is gone.\n"
    + "m2\tWifi drops\tEvery ten minutes.\n"
)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "questions.tsv"
    path.write_text(CORPUS)
    return path


def test_bracketed_text_in_results_and_warnings_is_printed_as_is(run, corpus, monkeypatch):
    from qres.backends.embedded import EmbeddedBackend

    def refuse(self, record):
        raise BackendError("action [indices:data/write/index] is unauthorized for user [qres]")

    monkeypatch.setattr(EmbeddedBackend, "log_search", refuse)
    monkeypatch.setattr(EmbeddedBackend, "keeps_search_log", True)
    assert run("index", corpus).exit_code == 0
    result = run("search", "grub menu", "--log-queries")
    assert result.exit_code == 0, result.output
    assert "grub [fix] [b]menu[/b]" in result.output
    assert (
        "warning: search not logged: action [indices:data/write/index] is unauthorized for "
        "user [qres]" in result.output
    )


def test_interrupted_rebuild_says_it_was_discarded(run, corpus, monkeypatch):
    import qres.indexing.pipeline

    assert run("index", corpus).exit_code == 0
    original = qres.indexing.pipeline.index_questions

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(qres.indexing.pipeline, "index_questions", interrupted)
    result = run("index", corpus, "--rebuild")
    assert result.exit_code == 130
    assert "interrupted: the rebuild was discarded; the index is as it was before this run" in (
        result.output
    )
    assert "everything committed" not in result.output
    monkeypatch.setattr(qres.indexing.pipeline, "index_questions", original)
    assert json.loads(run("--json", "info").output)["questions"] == 2  # the old index, intact


def test_interrupted_indexing_says_committed_work_is_kept(run, corpus, monkeypatch):
    import qres.indexing.pipeline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(qres.indexing.pipeline, "index_questions", interrupted)
    result = run("index", corpus)
    assert result.exit_code == 130
    assert "interrupted: everything committed before this point is kept" in result.output


def test_sigterm_during_rebuild_cleans_up_like_ctrl_c(tmp_path, corpus, monkeypatch, capsys):
    import qres.indexing.pipeline
    from qres.cli import main

    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("QRES_BACKEND", raising=False)
    previous = signal.getsignal(signal.SIGTERM)

    def unhandled(_signum, _frame):  # instead of killing pytest, should qres not handle it
        raise AssertionError("qres installed no SIGTERM handler")

    signal.signal(signal.SIGTERM, unhandled)
    try:
        monkeypatch.setattr("sys.argv", ["qres", "index", str(corpus)])
        with pytest.raises(SystemExit) as done:
            main()
        assert done.value.code in (0, None)

        def terminated(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts this
            raise AssertionError("SIGTERM did not stop the run")

        monkeypatch.setattr(qres.indexing.pipeline, "index_questions", terminated)
        monkeypatch.setattr("sys.argv", ["qres", "index", str(corpus), "--rebuild"])
        with pytest.raises(SystemExit) as done:
            main()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert done.value.code == 143
    assert "interrupted: the rebuild was discarded" in capsys.readouterr().err
    index_dir = tmp_path / "home" / "index"
    assert index_dir.is_dir()


def test_info_shows_index_dir_only_for_the_embedded_backend(run, monkeypatch):
    embedded = json.loads(run("--json", "info").output)
    assert "index_dir" in embedded
    monkeypatch.setenv("QRES_ES_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("QRES_ES_TIMEOUT", "2")
    down = run("--backend", "elasticsearch", "--json", "info")  # a failure, not a row
    assert down.exit_code == 1
    assert down.output.startswith("error: cannot reach Elasticsearch at http://127.0.0.1:9")
    assert "index_dir" not in down.output


def test_info_is_read_as_lines_not_as_json(run, corpus, monkeypatch):
    """Nested values (the index's settings, the providers) were printed as raw JSON."""
    monkeypatch.setenv("COLUMNS", "200")
    assert run("index", corpus).exit_code == 0
    shown = run("info")
    assert shown.exit_code == 0, shown.output
    assert "{" not in shown.output and '"' not in shown.output
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in shown.output.splitlines()]
    rows = [row for row in rows if len(row) == 2]
    assert ["questions", "2"] in rows
    assert ["index_metadata", "analyzer: english"] in rows
    assert ["", f"corpora: {corpus}"] in rows
    assert any(
        row[0] == "onnx_providers" and row[1].startswith("CPUExecutionProvider: ") for row in rows
    )


def test_info_cells_name_each_value_as_a_person_reads_it():
    from qres.cli.info import _cell

    assert (
        _cell({"closed": True, "ann": None, "rows": 12345}) == "closed: yes\nann: -\nrows: 12,345"
    )
    assert _cell(["a", ["b", 3000]]) == "a\nb, 3,000"
    assert _cell({"cv": {"folds": 5}}) == 'cv: {"folds": 5}'  # deeper: as JSON still
    assert _cell(2.0) == "2.0" and _cell(False) == "no"


@pytest.mark.parametrize("command", ["adapt", "download", "import-encoder", "serve"])
def test_a_command_that_prints_no_json_refuses_json_instead_of_ignoring_it(command):
    from click.testing import CliRunner

    from qres.cli import cli

    before = CliRunner().invoke(cli, ["--json", command])
    assert before.exit_code == 2
    assert f"qres {command} prints no JSON: leave out --json" in before.output
    after = CliRunner().invoke(cli, [command, "--json"])
    assert after.exit_code == 2 and "No such option" in after.output
    assert "--json" not in CliRunner().invoke(cli, [command, "--help"]).output


def test_a_query_of_unquoted_words_is_searched_as_one_text(run, corpus):
    assert run("index", corpus).exit_code == 0
    found = run("--json", "search", "wifi", "drops", "-k", "1")
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["query"] == "wifi drops"
    assert json.loads(found.stdout)["results"][0]["id"] == "m2"


@pytest.mark.parametrize(
    "given", [["--fusion", "f.json"], ["--candidates", "50"], ["--dense-candidates", "50"]]
)
def test_options_that_rescore_are_refused_where_nothing_is_rescored(run, corpus, given):
    assert run("index", corpus).exit_code == 0  # no model: BM25 alone
    for mode in ([], ["--mode", "bm25"]):
        refused = run("search", "wifi", *mode, *given)
        assert refused.exit_code == 2 and "nothing is rescored in bm25 mode" in refused.output


def test_a_fusion_file_or_device_that_is_not_there_says_so(tmp_path, monkeypatch):
    from qres.encoders.runtime import EncoderError, Runtime
    from qres.ranking.fusion import Fusion

    with pytest.raises(ValueError, match="nowhere.json: no such fusion file"):
        Fusion.read(tmp_path / "nowhere.json")
    monkeypatch.setenv("QRES_DEVICE", "gpu")
    with pytest.raises(EncoderError, match="^QRES_DEVICE: unknown device 'gpu'"):
        Runtime.from_env()
    with pytest.raises(EncoderError, match="^--device: unknown device 'tpu'"):
        Runtime.from_env("tpu")


@pytest.mark.parametrize("command", [["search", "x"], ["info"], ["index", "c.tsv"]])
def test_a_qres_home_that_is_a_file_is_said_once_for_every_command(
    run, tmp_path, monkeypatch, command
):
    (tmp_path / "home").write_text("")
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    result = run(*command)
    assert result.exit_code == 1
    assert result.output.strip() == f"error: {tmp_path / 'home'}: QRES_HOME is a file, not a folder"
