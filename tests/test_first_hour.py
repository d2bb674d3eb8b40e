"""Mistakes a new user makes in the first hour, each answered in one line with nothing
changed: a typo's huge -k, a title boost that is not a number, an option only a new index
takes, a run that fails before any question is written, a rebuild that would drop vectors, an
Index left open by an error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qres import Index
from qres.backends.base import BackendError, index_models
from qres.backends.embedded import EmbeddedBackend

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "qres" / "models" / "default"
FORUM = "id\ttitle\tbody\nq1\tNew title cherry\tbody text\nq2\tbanana bread\tbaking\n"
OTHER = "id\ttitle\tbody\nother1\tOther forum question\tbody\n"


@pytest.fixture
def files(tmp_path):
    (tmp_path / "forum.tsv").write_text(FORUM)
    (tmp_path / "other.tsv").write_text(OTHER)
    return tmp_path


def test_a_k_past_the_index_size_answers_instead_of_aborting(run, files):
    ix = files / "ix"
    assert run("index", files / "forum.tsv", "--index-dir", ix).exit_code == 0
    found = run("--json", "search", "cherry", "-k", 3_000_000_000, "--index-dir", ix)
    assert found.exit_code == 0, found.output
    assert [r["id"] for r in json.loads(found.stdout)["results"]] == ["q1"]
    with EmbeddedBackend(ix) as backend:
        assert [h.id for h in backend.search("cherry bread", 3_000_000_000)] in (
            ["q1", "q2"],
            ["q2", "q1"],
        )
        assert backend.nearest([1.0, 0.0], 3_000_000_000) == []  # no vectors: none


@pytest.mark.parametrize("boost", ["nan", "inf", "-3"])
def test_a_title_boost_that_is_not_a_weight_is_refused_and_makes_nothing(run, files, boost):
    done = run("index", files / "forum.tsv", "--index-dir", files / "ix", "--title-boost", boost)
    assert done.exit_code == 2 and "--title-boost" in done.output
    assert not (files / "ix").exists()
    with pytest.raises(BackendError, match="title_boost must be a number of at least 0"):
        EmbeddedBackend(files / "api", create=True, title_boost=float(boost))
    assert not (files / "api").exists()


def test_an_option_only_a_new_index_takes_is_refused_on_an_existing_one(run, files):
    ix = files / "ix"
    assert run("index", files / "forum.tsv", "--index-dir", ix, "--title-boost", 3).exit_code == 0
    again = run("index", files / "forum.tsv", "--index-dir", ix, "--title-boost", 5)
    assert again.exit_code == 1
    assert "--title-boost 5.0: this index was made with 3.0" in again.output
    assert "add --rebuild" in again.output
    plain = run("index", files / "forum.tsv", "--index-dir", ix, "--analyzer", "plain")
    assert plain.exit_code == 1 and "made with english" in plain.output
    assert run("index", files / "forum.tsv", "--index-dir", ix, "--title-boost", 3).exit_code == 0
    rebuilt = run("index", files / "forum.tsv", "--index-dir", ix, "--rebuild", "--title-boost", 5)
    assert rebuilt.exit_code == 0
    with EmbeddedBackend(ix) as backend:
        assert backend.metadata()["title_boost"] == 5.0


def test_a_run_that_fails_before_writing_records_no_corpus_and_makes_no_index(run, files):
    ix = files / "ix"
    assert run("index", files / "forum.tsv", "--index-dir", ix, "--model", MODEL).exit_code == 0
    with EmbeddedBackend(ix) as backend:
        before = backend.metadata()
    # a links file that is not there fails the run after the index is opened
    missing = files / "PostLinks.xml"
    args = ("--index-dir", ix, "--add-to-existing", "--links", missing)
    failed = run("index", files / "other.tsv", *args)
    assert failed.exit_code == 1 and "PostLinks.xml" in failed.output
    with EmbeddedBackend(ix) as backend:
        assert backend.metadata() == before and backend.count() == 2
    # so the other corpus is still refused without --add-to-existing
    refused = run("index", files / "other.tsv", "--index-dir", ix, "--model", MODEL)
    assert refused.exit_code == 1 and "other.tsv: give it its own index" in refused.output
    # a model directory that is not one: nothing is made
    bad = run("index", files / "forum.tsv", "--index-dir", files / "new", "--model", files)
    assert bad.exit_code == 1 and "model card not found" in bad.output
    assert not (files / "new").exists()


def test_a_rebuild_keeps_the_models_the_index_holds_unless_told(run, files):
    """A rebuild without --model made an index without vectors, saying so only once the old
    one was gone: the hours a forum's encoding took were lost to `qres index Posts.xml
    --rebuild`, which docs/real-forums.md gives for storing extras."""
    ix = files / "ix"
    assert run("index", files / "forum.tsv", "--index-dir", ix, "--model", MODEL).exit_code == 0
    rebuilt = run("index", files / "forum.tsv", "--index-dir", ix, "--rebuild")
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "index now holds 2 with vectors" in rebuilt.output
    with EmbeddedBackend(ix) as backend:
        assert [m["model_dir"] for m in index_models(backend.metadata())] == [str(MODEL)]
    dropped = run("index", files / "forum.tsv", "--index-dir", ix, "--rebuild", "--no-vectors")
    assert dropped.exit_code == 0, dropped.output
    assert "rebuilt without vectors (--no-vectors): dropped those of default" in dropped.output
    with EmbeddedBackend(ix) as backend:
        assert not index_models(backend.metadata())
    for wrong in (["--no-vectors"], ["--rebuild", "--no-vectors", "--model", MODEL]):
        refused = run("index", files / "forum.tsv", "--index-dir", ix, *wrong)
        assert refused.exit_code == 2
        assert "--no-vectors goes with --rebuild, without --model" in refused.output


def test_a_rebuild_whose_model_is_gone_says_how_to_go_on_and_changes_nothing(run, files):
    import shutil

    model = files / "model"
    shutil.copytree(MODEL, model)
    ix = files / "ix"
    assert run("index", files / "forum.tsv", "--index-dir", ix, "--model", model).exit_code == 0
    shutil.rmtree(model)
    refused = run("index", files / "forum.tsv", "--index-dir", ix, "--rebuild")
    assert refused.exit_code == 1
    assert f"the index's model {model} is gone" in refused.output
    assert "--no-vectors for BM25 alone" in refused.output
    with EmbeddedBackend(ix) as backend:
        assert backend.count() == 2 and index_models(backend.metadata())
    with pytest.raises(BackendError, match="is gone"):
        Index.open(ix, rebuild=True)
    with Index.open(ix, rebuild=True, no_vectors=True) as index:
        assert index.add(files / "forum.tsv").indexed == 2
    with EmbeddedBackend(ix) as backend:
        assert backend.count() == 2 and not index_models(backend.metadata())


def test_an_index_an_error_left_open_is_reclaimed_and_one_still_open_is_named(files):
    bad = files / "bad.tsv"
    bad.write_text("id\ttitle\tbody\nq1\tA\tb\nq2\tbroken\n")
    with pytest.raises(Exception, match="bad.tsv:3"):
        Index.open(files / "api").add(bad)  # the Index is dropped, its lock with it
    bad.write_text("id\ttitle\tbody\nq1\tA\tb\nq2\tfixed\tc\n")
    assert Index.open(files / "api").add(bad).indexed == 2  # not "another process"
    held = Index.open(files / "api")
    held.add(bad)
    with pytest.raises(BackendError, match="open for writing elsewhere in this process"):
        Index.open(files / "api").add(bad)
    held.close()
    with Index.open(files / "api") as reopened:
        assert reopened.count() == 2


@pytest.mark.parametrize("port", ["99999", "-5"])
def test_a_port_out_of_range_is_refused_naming_the_port(run, port):
    refused = run("serve", "--port", port)
    assert refused.exit_code == 2 and "'--port'" in refused.output


def test_a_tsv_header_in_any_column_order_is_read_as_tsv(run, tmp_path):
    corpus = tmp_path / "order.tsv"
    corpus.write_text("title\tid\ttags\tbody\nCherry pie\tz1\tbaking\tcrust and filling\n")
    done = run("index", corpus, "--index-dir", tmp_path / "ix")
    assert done.exit_code == 0, done.output
    assert "indexed 1 question in" in done.output  # one question, not "1 questions"
    found = run("--json", "search", "cherry", "--index-dir", tmp_path / "ix")
    assert json.loads(found.stdout)["results"][0]["id"] == "z1"


def test_a_pasted_long_query_heads_the_table_on_one_line(run, files):
    assert run("index", files / "forum.tsv", "--index-dir", files / "ix").exit_code == 0
    long = "cherry " * 500
    shown = run("search", long, "--index-dir", files / "ix")
    assert shown.exit_code == 0 and "q1" in shown.output
    assert long.strip() not in shown.output and "…" in shown.output


def test_evaluate_refuses_what_it_could_not_print_or_save_before_it_runs(run, tmp_path):
    forum = tmp_path / "forum"  # no dump here: a refusal must come before it is read
    forum.mkdir()
    base = ["evaluate", "--dataset", "stackexchange", "--data-dir", forum, "--ranker", "bm25"]
    acc = run(*base, "--accuracy-at", "5")
    assert acc.exit_code == 2 and "--accuracy-at" in acc.output and "R@10" in acc.output
    saved = run(*base, "--save-run", tmp_path / "nowhere" / "x.txt")
    assert saved.exit_code == 2
    assert f"{tmp_path / 'nowhere'}: no such folder" in " ".join(saved.output.split())
    (tmp_path / "fusion.json").write_text("{}")
    fused = run(*base, "--fusion", tmp_path / "fusion.json")  # bm25 alone fuses nothing
    assert fused.exit_code == 2 and "--ranker hybrid" in fused.output


@pytest.mark.parametrize("flag", ["--links", "--no-links"])
def test_evaluate_refuses_link_flags_where_there_are_no_links(run, flag):
    result = run("evaluate", "--dataset", "semeval2016", "--ranker", "bm25", flag)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--links/--no-links" in result.output and "duplicate links" in result.output


@pytest.mark.parametrize("date", ["", ' CreationDate="yesterday"'])
def test_a_forum_whose_duplicate_links_have_no_dates_is_refused_naming_the_line(
    run, tmp_path, date
):
    (tmp_path / "Posts.xml").write_text(
        '<posts>\n<row Id="1" PostTypeId="1" Title="visa rules" Body="schengen visa" />\n'
        '<row Id="2" PostTypeId="1" Title="visa help" Body="schengen visa please" />\n</posts>\n'
    )
    (tmp_path / "PostLinks.xml").write_text(
        f'<postlinks>\n<row Id="1"{date} PostId="2" RelatedPostId="1" LinkTypeId="3" />\n'
        "</postlinks>\n"
    )
    args = ["evaluate", "--dataset", "stackexchange", "--data-dir", tmp_path, "--ranker", "bm25"]
    result = run(*args)
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'PostLinks.xml'}:2: a duplicate link's ")
    assert "not a date (YYYY-MM-DDTHH:MM:SS)" in line
    # indexing, which follows links without replaying them, still takes them
    assert run("index", tmp_path / "Posts.xml", "--index-dir", tmp_path / "ix").exit_code == 0


def test_evaluates_first_example_runs_as_written_without_a_corpus(run):
    result = run("--json", "evaluate", "--dataset", "askubuntu", "--split", "test")
    assert result.exit_code == 0, result.output
    (given,) = json.loads(result.stdout)  # bm25 needs the texts (--corpus): given-order alone
    assert given["ranker"] == "given-order" and round(given["metrics"]["MAP"], 1) == 56.0
    asked = run("evaluate", "--dataset", "askubuntu", "--split", "test", "--ranker", "bm25")
    assert asked.exit_code == 1 and "pass --corpus" in asked.output  # asked for: still said


def test_an_index_another_user_made_unreadable_says_so_in_one_line(run, files, monkeypatch):
    import tantivy

    ix = files / "ix"
    assert run("index", files / "forum.tsv", "--index-dir", ix).exit_code == 0

    def denied(path):  # what tantivy raises for a .managed.json of mode 600 and another owner
        raise ValueError(
            "IoError { io_error: Os { code: 13, kind: PermissionDenied, "
            'message: "Permission denied" } }'
        )

    monkeypatch.setattr(tantivy.Index, "open", denied)
    result = run("search", "cherry", "--index-dir", ix)
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line == (
        f"error: {ix / 'tantivy'}: cannot open the index: permission denied reading its files "
        f"(made by another user? let this one read them: chmod -R a+rX {ix})"
    )


def test_askubuntus_downloaded_texts_are_found_without_corpus(tmp_path, monkeypatch):
    import gzip

    from qres.evaluation.runner import load_benchmark

    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    assert load_benchmark("askubuntu", "test").missing_texts  # nothing downloaded yet
    downloaded = tmp_path / "home" / "data" / "askubuntu" / "text_tokenized.txt.gz"
    downloaded.parent.mkdir(parents=True)
    with gzip.open(downloaded, "wt") as f:
        f.write("1\tboot from usb\tmy usb stick\n")
    found = load_benchmark("askubuntu", "test")
    assert not found.missing_texts and found.source == downloaded


@pytest.mark.parametrize(
    ("header", "found"),
    [("question_id\ttitle\tbody", "question_id, title, body"), ("Title\tBody", "Title, Body")],
)
def test_a_header_without_an_id_column_is_refused_not_indexed_as_a_question(
    run, tmp_path, header, found
):
    corpus = tmp_path / "h.tsv"
    corpus.write_text(f"{header}\nq1\tVisa for Japan\tDo I need one\n")
    result = run("index", corpus, "--index-dir", tmp_path / "ix")
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line == (
        f"error: {corpus}:1: a header without an id column (found {found}): name the id column `id`"
    )
    assert not (tmp_path / "ix").exists()


def test_links_and_no_links_together_are_refused(run, files):
    links = files / "PostLinks.xml"
    links.write_text("<postlinks>\n</postlinks>\n")
    args = ["index", files / "forum.tsv", "--links", links, "--no-links"]
    result = run(*args, "--index-dir", files / "ix")
    assert result.exit_code == 2 and "--links FILE and --no-links" in result.output
    assert not (files / "ix").exists()


def test_a_dash_reads_the_corpus_from_standard_input(files, monkeypatch):
    from click.testing import CliRunner

    from qres.cli import cli

    monkeypatch.setenv("QRES_HOME", str(files / "home"))
    result = CliRunner().invoke(cli, ["--json", "index", "-"], input=FORUM)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["indexed"] == 2


def _zip(path: Path) -> Path:
    import zipfile

    # Written at 01:20 on a 28 November, its header holds so many NUL bytes that it looked
    # like UTF-16 text (as 9 of a day's 1,440 minutes do): the test failed at those times.
    written = zipfile.ZipInfo("cooking.csv", (2026, 11, 28, 1, 20, 0))
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(written, "id,title,content,tags\n1,t,b,x\n")
    return path


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda d: d / "forum", "{corpus}: a folder, not a file: give {corpus}/Posts.xml"),
        (lambda d: _zip(d / "cooking.csv.zip"), "{corpus}: a zip archive: unzip it (qres reads"),
        (
            lambda d: write(d / "p.json", '{\n  "id": 1,\n  "title": "t"\n}\n'),
            "{corpus}:1: invalid JSON (Expecting property name enclosed in double quotes at "
            "column 1): qres reads JSON Lines, one object per line",
        ),
        (
            lambda d: write(d / "a.json", '[{"id": 1, "title": "t"}]\n'),
            "{corpus}:1: expected a JSON object: qres reads JSON Lines, one object per line",
        ),
    ],
    ids=["folder", "zip", "pretty-printed-json", "json-array"],
)
def test_input_of_the_wrong_kind_is_named_in_one_line(run, tmp_path, make, said):
    (tmp_path / "forum").mkdir()
    (tmp_path / "forum" / "Posts.xml").write_text("<posts>\n</posts>\n")
    corpus = make(tmp_path)
    result = run("index", corpus, "--index-dir", tmp_path / "ix")
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: " + said.format(corpus=corpus)), line
    assert "guessed" not in line and not (tmp_path / "ix").exists()


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
