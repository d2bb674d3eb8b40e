"""What the command line says: user text printed as it is, interruptions told truthfully,
``qres info`` showing only what applies to the backend."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

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


def test_interrupted_indexing_says_it_committed_none(run, corpus, monkeypatch):
    """It said "everything committed before this point is kept" whether or not anything was."""
    import qres.indexing.pipeline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(qres.indexing.pipeline, "index_questions", interrupted)
    result = run("index", corpus)
    assert result.exit_code == 130
    assert result.output.splitlines()[-1] == (
        "interrupted: this run committed no questions (the index holds 0); the same command "
        "again indexes the rest"
    )


def test_interrupted_indexing_counts_what_this_run_committed(run, corpus, monkeypatch):
    """One question of the two written, then Ctrl-C: the line counts it, and the index."""
    import qres.indexing.pipeline

    assert run("index", corpus).exit_code == 0  # m1 and m2
    corpus.write_text(CORPUS + "m3\tA third\tNew.\nm4\tA fourth\tNew too.\n")
    real = qres.indexing.pipeline.index_questions

    def stopped_after_one(backend, questions, **kwargs):
        new = [q for q in questions if q.id in ("m3", "m4")]
        real(backend, new[:1], **kwargs)  # on_batch: the one written
        raise KeyboardInterrupt

    monkeypatch.setattr(qres.indexing.pipeline, "index_questions", stopped_after_one)
    result = run("index", corpus)
    assert result.exit_code == 130
    assert result.output.splitlines()[-1] == (
        "interrupted: this run committed 1 question, kept in the index (it holds 3); the same "
        "command again indexes the rest"
    )
    monkeypatch.setattr(qres.indexing.pipeline, "index_questions", real)
    assert json.loads(run("--json", "info").output)["questions"] == 3


def test_the_interrupted_line_counts_as_a_person_reads(monkeypatch):
    from qres.cli.output import committed_line

    rest = "; the same command again indexes the rest"
    assert committed_line(0) == "this run committed no questions" + rest
    assert committed_line(4096, 8000) == (
        "this run committed 4,096 questions, kept in the index (it holds 8,000)" + rest
    )


def test_a_ctrl_c_while_the_interrupted_line_is_written_does_not_cut_it_short(run):
    """A second Ctrl-C that came while qres wrote its "interrupted:" line replaced it with
    click's "Aborted!" and exit status 1 (1 of 16 double Ctrl-Cs of `qres index --rebuild`)."""
    import click

    from qres.cli import cli

    class PressedAgain:  # Ctrl-C again as the line that says what was kept is made
        def __format__(self, spec):
            signal.raise_signal(signal.SIGINT)
            return "what was kept"

    @click.command("stopped")
    @click.pass_obj
    def stopped(obj):
        obj.on_interrupt = PressedAgain()
        raise KeyboardInterrupt

    cli.add_command(stopped)
    try:
        result = run("stopped")
    finally:
        cli.commands.pop("stopped")
    assert result.exit_code == 130, result.output
    assert result.output.splitlines()[-1] == "interrupted: what was kept"


def _run_command_raising(run, error: BaseException):
    import click

    from qres.cli import cli

    @click.command("loads")
    def loads():
        raise error

    cli.add_command(loads)
    try:
        return run("loads")
    finally:
        cli.commands.pop("loads")


def test_a_ctrl_c_while_onnxruntime_loads_is_an_interruption_not_a_traceback(run):
    """onnxruntime's native module, loading when Ctrl-C came, raises ImportError("initialization
    failed") from the KeyboardInterrupt: `qres index` printed that traceback with exit 1 (4 of
    21 Ctrl-Cs pressed 0.19-0.22 s into a demo rebuild)."""
    try:
        raise ImportError("initialization failed") from KeyboardInterrupt()
    except ImportError as err:
        failed_load = err
    result = _run_command_raising(run, failed_load)
    assert result.exit_code == 130, result.output
    assert result.output.splitlines()[-1] == (
        "interrupted: everything committed before this point is kept"
    )


def test_an_import_error_that_no_ctrl_c_caused_is_not_called_an_interruption(run):
    with pytest.raises(ImportError, match="initialization failed"):
        _run_command_raising(run, ImportError("initialization failed"))


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


# `qres ARGS...` whose writes each take 50 ms more (a run of seconds, whatever the machine),
# touching MARKER once a batch is written.
SLOW_WRITES = """
import signal, sys, time
from pathlib import Path
import qres.backends.embedded as embedded
from qres.cli import main

signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's process has it
marker, args = Path(sys.argv[1]), sys.argv[2:]
real = embedded.EmbeddedBackend.upsert

def upsert(*a, **kw):
    real(*a, **kw)
    marker.touch()
    time.sleep(0.05)

embedded.EmbeddedBackend.upsert = upsert
sys.argv = ["qres", *args]
main()
"""
INTERRUPTED = re.compile(
    r"interrupted: this run committed ([\d,]+) questions?, kept in the index "
    r"\(it holds ([\d,]+)\); the same command again indexes the rest"
)


def test_ctrl_c_says_how_many_questions_this_run_committed(run, tmp_path):
    """A real Ctrl-C to the process group once a batch is written, into an index that held
    200 questions: the last line counts the questions this run committed, and the index
    holds exactly those more."""
    import subprocess
    import sys

    from qres.backends.embedded import EmbeddedBackend
    from tests.safety_helpers import CHILD_ENV, assert_committed_prefix, make_corpus, write_tsv

    questions, index_dir = make_corpus(4000), tmp_path / "ix"
    corpus = write_tsv(tmp_path / "c.tsv", questions[:200])
    assert run("--index-dir", index_dir, "index", corpus).exit_code == 0
    write_tsv(corpus, questions)  # the same file, grown: 3,800 to go, 20 a batch
    marker, log = tmp_path / "a-batch-is-written", tmp_path / "stderr.txt"
    args = ("--index-dir", index_dir, "index", corpus, "--workers", "0", "--batch-size", "20")
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", SLOW_WRITES, marker, *map(str, args)],
            env=CHILD_ENV,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # its own group, signalled as a terminal signals its own
        )
        try:
            deadline = time.monotonic() + 120
            while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert marker.exists(), log.read_text()
            os.killpg(proc.pid, signal.SIGINT)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    said = log.read_text()
    with EmbeddedBackend(index_dir) as b:
        held = assert_committed_prefix(b, questions)
    if code == 0:  # the 190 writes left (9.5 s at least) were done before Ctrl-C came
        assert held == 4000, said
        return
    assert code == 130, said
    *before, last = said.strip().splitlines()
    assert all(line.startswith("stopping: writing what is encoded first") for line in before)
    found = INTERRUPTED.fullmatch(last)
    assert found, said
    committed, holds = (int(n.replace(",", "")) for n in found.groups())
    assert 20 <= committed < 3800 and holds == held == 200 + committed, said


def test_the_help_examples_run_as_written_after_the_readmes_main_job(run, tmp_path, monkeypatch):
    """`qres index --help`'s first example named the fast set and its third a models/minilm
    folder that `qres import-encoder minilm` does not make: both failed for a user who had
    just run the README's main job. Its minilm set is stood in for by a tiny model; examples
    run from the checkout, ~ being a fresh home; those reading a file of the user's (a dump's
    Posts.xml) are left out, their models checked."""
    import click

    from qres.cli import cli
    from tests.safety_helpers import REPO, write_model
    from tests.test_docs_commands import help_examples, invocations

    write_model(tmp_path / "home" / "models" / "minilm")  # `qres import-encoder minilm`
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    main_job = run("index", "qres/data/demo/questions.tsv", "--model-set", "minilm")
    assert main_job.exit_code == 0, main_job.output
    ran = []
    for name in ("index", "search", "info", "compact"):
        command = cli.get_command(click.Context(cli), name)
        for line in help_examples(f"{command.help}\n{command.epilog or ''}"):
            for args in invocations(line):
                args = [os.path.expanduser(a) for a in args]
                if name == "index" and not os.path.exists(args[1]):  # the user's own file
                    models = [args[i + 1] for i, flag in enumerate(args) if flag == "--model"]
                    assert all(os.path.isdir(m) for m in models), line  # but not its models
                    continue
                result = run(*args)
                assert result.exit_code == 0, f"qres {' '.join(args)}: {result.output}"
                ran.append(args[0])
    assert ran.count("index") == 2 and {"search", "info", "compact"} <= set(ran)


def test_a_model_added_to_an_index_says_the_questions_it_held_got_its_vectors(
    run, corpus, tmp_path
):
    """The 330 demo questions given a second model's vectors were summed up as "indexed 0
    questions ... 330 already indexed as they are", as if nothing had been done."""
    from tests.safety_helpers import write_model

    first, second = write_model(tmp_path / "first"), write_model(tmp_path / "second", seed=1)
    assert run("index", corpus, "--model", first).exit_code == 0
    added = run("index", corpus, "--model", first, "--model", second)
    assert added.exit_code == 0, added.output
    assert "added the vectors of second (new to the index) to the 2 questions it held" in (
        added.output
    )
    both = ("index", corpus, "--model", first, "--model", second)
    again = json.loads(run("--json", *both).stdout)
    assert again["models_added"] == [] and again["questions_given_new_vectors"] == 0
    assert "added the vectors" not in run(*both).output


def test_info_names_the_model_set_the_index_holds(run, corpus, tmp_path, monkeypatch):
    """/readyz named it; `qres info` did not."""
    from qres.encoders import model_set
    from qres.encoders.card import read_card
    from tests.safety_helpers import write_model

    minilm = write_model(tmp_path / "home" / "models" / "minilm")
    fitted_for = {"minilm": {"minilm": read_card(minilm / "model.json")["fingerprint"]}}

    def expected(name="default"):
        if name not in fitted_for:
            raise ValueError(f"no {name} here")
        return fitted_for[name]

    monkeypatch.setattr(model_set, "expected_fingerprints", expected)
    monkeypatch.setenv("COLUMNS", "200")
    assert run("index", corpus).exit_code == 0  # BM25 alone: no set
    assert json.loads(run("--json", "info").output)["model_set"] is None
    assert run("index", corpus, "--rebuild", "--model-set", "minilm").exit_code == 0
    assert json.loads(run("--json", "info").output)["model_set"] == "minilm"
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in run("info").output.splitlines()]
    assert ["model_set", "minilm"] in rows


def test_help_names_what_it_takes_as_its_usage_does():
    """`qres adapt --help` took FORUM and described DIR; `qres tags -k` said nothing."""
    from click.testing import CliRunner

    from qres.cli import cli

    adapt = CliRunner().invoke(cli, ["adapt", "--help"]).output
    assert "adapt [OPTIONS] FORUM\n" in adapt
    assert "FORUM is a StackExchange dump's folder" in adapt and "DIR holds" not in adapt
    tags = CliRunner().invoke(cli, ["tags", "--help"]).output
    assert "-k INTEGER RANGE   How many tags to suggest, the most probable first." in tags


def test_the_parity_error_says_what_it_compares_and_its_bound():
    """`import-encoder ... --quantize int8` printed "parity error 7.3e-02" and no more."""
    from qres.training.commands.import_encoder import _parity

    export = {"parity_max_abs_error": 0.073, "parity_texts_tokens": [1, 7, 256, 512]}
    card = {"encoder": {"quantize": "int8"}, "export": export, "training": {}}
    compared = (
        "; parity error 7.3e-02: the largest difference from sentence-transformers' unit "
        "vectors on texts of 1, 7, 256 and 512 tokens"
    )
    assert _parity(card) == (
        f"{compared}; int8 weights are not held to the 1e-04 an unquantised import must meet "
        "(what int8 costs in ranking: docs/quality-cost.md)"
    )
    whole = {**card, "encoder": {"quantize": None}}
    assert _parity(whole) == f"{compared} (at most 1e-04 passes)"
    cut = {**card, "training": {"derived_from": "abc"}}
    assert _parity(cut) == f"{compared}, measured before the cut and int8 (at most 1e-04 passes)"
    assert _parity({"encoder": {}, "export": {}}) == ""


def test_an_empty_query_is_refused_and_an_empty_index_says_it_holds_nothing(run, tmp_path):
    from qres.backends.embedded import EmbeddedBackend

    refused = run("search", "  ")
    assert refused.exit_code == 2 and "the query is empty" in refused.output
    with EmbeddedBackend(tmp_path / "empty", create=True):  # what an interrupted first run leaves
        pass
    said = run("--index-dir", tmp_path / "empty", "search", "wifi")
    assert said.exit_code == 0
    assert "no results: the index holds no questions yet" in said.output


def test_questions_with_bytes_that_are_not_utf8_are_indexed_and_named_in_a_warning(run, tmp_path):
    """A Latin-1 export's accents became U+FFFD without a word: "Caf\ufffd in Z\ufffdrich"
    was indexed and shown, and a search for "Zurich cafe" found nothing."""
    latin = tmp_path / "latin.tsv"
    latin.write_bytes(
        b"id\ttitle\tbody\nq1\tWifi drops\tEvery ten minutes.\n"
        b"q2\tCaf\xe9 in Z\xfcrich\tOpen late?\nq3\tNa\xefve question\tSee title.\n"
    )
    shown = run("index", latin)
    assert shown.exit_code == 0, shown.output
    assert (
        f"warning: {latin}:3: 2 questions (the first here) hold U+FFFD (\ufffd), what bytes "
        "that are not UTF-8 become: a file in another encoding needs converting (iconv -f "
        f"latin1 -t utf-8 {latin}) and indexing again"
    ) in " ".join(shown.output.split())
    summary = json.loads(run("--json", "index", latin, "--rewrite").stdout)
    assert (summary["indexed"], summary["undecodable"]) == (3, 2)
    assert summary["first_undecodable"] == f"{latin}:3"
    clean = tmp_path / "clean.tsv"
    clean.write_text(CORPUS)
    assert "U+FFFD" not in run("index", clean, "--add-to-existing").output


def test_the_index_summary_says_only_the_counts_that_are_not_zero(run, corpus):
    first = " ".join(run("index", corpus).output.split())
    assert re.search(
        r"indexed 2 questions in [0-9.]+s \([0-9,]+/s\); index now holds 2 BM25", first
    )
    again = " ".join(run("index", corpus).output.split())
    assert "2 already indexed as they are, index now holds 2" in again
    assert "skipped" not in again and "duplicate id" not in again and "truncated" not in again


def test_an_error_qres_did_not_expect_is_one_line_and_its_traceback_is_kept(
    run, corpus, monkeypatch
):
    """A NameError in `qres search --typing` reached the user as a 30-line traceback."""
    import qres.ranking.search

    def broken(self, *args, **kwargs):
        raise NameError("name 'snippet' is not defined")

    assert run("index", corpus).exit_code == 0
    monkeypatch.setattr(qres.ranking.search.SearchPipeline, "search", broken)
    monkeypatch.delenv("QRES_TRACEBACK")
    said = run("search", "wifi")
    assert said.exit_code == 1 and said.output.count("\n") == 1, said.output
    line = said.output.strip()
    assert line.startswith(
        "error: qres failed unexpectedly (NameError: name 'snippet' is not defined): a bug; "
        "please report it with "
    )
    kept = Path(line.split("please report it with ")[1].split(" (its traceback)")[0])
    assert 'raise NameError("name' in kept.read_text() and "Traceback" in kept.read_text()
    kept.unlink()
    monkeypatch.setenv("QRES_TRACEBACK", "1")  # as the tests run: the traceback itself
    with pytest.raises(NameError):
        run("search", "wifi")
