"""Data safety of the embedded index, one test per way it used to lose or corrupt data
(issue 10): torn vector rows, rebuilds over foreign directories, stale vectors after a
rebuild, a rejected writer rewriting metadata, read-only and damaged indexes, dead rows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from qres.backends import embedded
from qres.backends.base import BackendError
from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import Question
from qres.encoders.runtime import Encoder
from qres.indexing.pipeline import index_questions
from qres.ranking.search import SearchPipeline
from tests.fakes import TableEncoder
from tests.safety_helpers import (
    assert_committed_prefix,
    make_corpus,
    python,
    vector_mismatches,
    write_model,
    write_tsv,
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("model") / "bow")


@pytest.fixture(scope="module")
def encoder(model_dir):
    return Encoder.load(model_dir)


def build(path, questions, encoder, **kwargs):
    with EmbeddedBackend(path, create=True) as b:
        index_questions(b, questions, encoder=encoder, batch_size=50, **kwargs)


# -- 1: a torn vector row never shifts later vectors ------------------------------------------


def test_a_torn_vector_row_is_cut_off_before_the_next_append(tmp_path, encoder):
    questions = make_corpus(300)
    build(tmp_path / "ix", questions[:150], encoder)
    with open(tmp_path / "ix" / "vectors.f16", "ab") as f:
        f.write(b"\0" * 100)  # what a crash or a full disk in mid-write leaves
    build(tmp_path / "ix", questions, encoder)
    with EmbeddedBackend(tmp_path / "ix") as b:
        assert b.count() == 300
        assert vector_mismatches(b, encoder, questions) == 0
    assert (tmp_path / "ix" / "vectors.f16").stat().st_size % (encoder.dim * 2) == 0


def test_a_full_disk_ends_in_one_line_and_a_rerun_completes(tmp_path, model_dir, encoder):
    """RLIMIT_FSIZE makes the vector file hit a 'full disk' in the middle of a row."""
    questions = make_corpus(3000)
    first, corpus = write_tsv(tmp_path / "a.tsv", questions[:1000]), tmp_path / "all.tsv"
    write_tsv(corpus, questions)
    index_dir = tmp_path / "ix"
    cli = "import sys; from qres.cli import main; sys.argv = ['qres'] + sys.argv[1:]; main()"
    # all.tsv holds a.tsv's questions and more: added to the index a.tsv was indexed into
    args = ("--index-dir", index_dir, "index", "--model", model_dir, "--add-to-existing")
    assert python(cli, *args, first).returncode == 0
    limited = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (80_003, 80_003))\n"
    proc = python(limited + cli, *args, corpus)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "vectors.f16: cannot write vectors (File too large)" in proc.stderr
    assert "Traceback" not in proc.stderr
    with EmbeddedBackend(index_dir) as b:  # what was there before the full disk is intact
        n = assert_committed_prefix(b, questions)
        assert n >= 1000 and vector_mismatches(b, encoder, questions[:n]) == 0
    assert python(cli, *args, corpus).returncode == 0  # space freed: the re-run completes
    with EmbeddedBackend(index_dir) as b:
        assert assert_committed_prefix(b, questions) == 3000
        assert vector_mismatches(b, encoder, questions) == 0


def test_a_file_size_limit_on_the_engine_files_names_the_index_the_cause_and_what_is_kept(
    tmp_path,
):
    """Issue 34: tantivy's own files hitting RLIMIT_FSIZE (an index without vectors) said only
    "An error occurred in a thread: 'An index writer was killed..'"."""
    corpus, index_dir = tmp_path / "c.tsv", tmp_path / "ix"
    write_tsv(corpus, make_corpus(200))
    cli = "import sys; from qres.cli import main; sys.argv = ['qres'] + sys.argv[1:]; main()"
    assert python(cli, "--index-dir", index_dir, "index", corpus).returncode == 0
    write_tsv(corpus, make_corpus(5_000, seed=2, prefix="more"))  # the same file, grown
    limited = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))\n"
    proc = python(limited + cli, "--index-dir", index_dir, "index", corpus)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {index_dir}: "), proc.stderr
    assert "file-size limit (ulimit -f) of 200,000 bytes" in proc.stderr
    assert "everything committed before this point is kept" in proc.stderr
    with EmbeddedBackend(index_dir) as b:
        assert b.count() == 200


def test_a_rebuild_that_fills_the_disk_names_the_live_index_and_says_it_is_as_it_was(
    tmp_path, model_dir
):
    """A write that fails in a rebuild (or a compaction) built aside named the hidden work
    directory and promised that "everything committed" was kept."""
    corpus, index_dir = tmp_path / "c.tsv", tmp_path / "ix"
    write_tsv(corpus, make_corpus(3000))
    cli = "import sys; from qres.cli import main; sys.argv = ['qres'] + sys.argv[1:]; main()"
    args = ("--index-dir", index_dir, "index", "--model", model_dir)
    assert python(cli, *args, corpus).returncode == 0
    limited = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (80_003, 80_003))\n"
    proc = python(limited + cli, *args, corpus, "--rebuild")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    # the vector file or tantivy's own files, whichever fills first: named in the live index
    assert proc.stderr.startswith(f"error: {index_dir}") and ": cannot write " in proc.stderr
    assert f"the work built aside is discarded: {index_dir} is as it was" in proc.stderr
    assert ".rebuild" not in proc.stderr
    with EmbeddedBackend(index_dir) as b:
        assert b.count() == 3000


# -- 2: --rebuild never deletes a directory that is not a qres index --------------------------


def test_rebuild_refuses_a_directory_that_is_not_an_index(run, tmp_path):
    corpus = write_tsv(tmp_path / "c.tsv", make_corpus(5))
    thesis = tmp_path / "d" / "thesis.txt"
    thesis.parent.mkdir()
    thesis.write_text("four years of work")
    result = run("--index-dir", thesis.parent, "index", corpus, "--rebuild")
    assert result.exit_code == 1
    assert "not a qres index" in result.output and "thesis.txt" in result.output
    assert thesis.read_text() == "four years of work"
    assert sorted(os.listdir(thesis.parent)) == ["thesis.txt"]


def test_creating_an_index_refuses_a_foreign_directory_too(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.md").write_text("x")
    with pytest.raises(BackendError, match="not a qres index"):
        EmbeddedBackend(tmp_path / "d", create=True)
    assert os.listdir(tmp_path / "d") == ["notes.md"]


def test_rebuild_replaces_an_index_and_an_empty_or_missing_directory(run, tmp_path):
    corpus = write_tsv(tmp_path / "c.tsv", make_corpus(5))
    (tmp_path / "empty").mkdir()
    for target in ("empty", "missing", "empty"):  # the last: now an index, rebuilt again
        result = run("--index-dir", tmp_path / target, "index", corpus, "--rebuild")
        assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tsv", "empty", "missing"]


def test_an_interrupted_swap_is_finished_by_the_next_open(tmp_path, encoder):
    questions = make_corpus(40)
    build(tmp_path / "ix", questions[:10], encoder)
    b = EmbeddedBackend(tmp_path / "ix", rebuild=True)
    index_questions(b, questions, encoder=encoder)
    b._close_files()
    os.replace(tmp_path / "ix", tmp_path / "ix.old")  # the crash: between the two renames
    b._release_lock()
    with EmbeddedBackend(tmp_path / "ix") as reopened:
        assert reopened.count() == 40
        assert vector_mismatches(reopened, encoder, questions) == 0
    assert not (tmp_path / "ix.old").exists() and not (tmp_path / "ix.rebuild").exists()


def test_an_interrupted_rebuild_leaves_the_live_index_as_it_was(tmp_path, encoder):
    questions = make_corpus(40)
    build(tmp_path / "ix", questions[:10], encoder)
    with pytest.raises(KeyboardInterrupt), EmbeddedBackend(tmp_path / "ix", rebuild=True) as b:
        index_questions(b, questions[10:], encoder=encoder)
        raise KeyboardInterrupt
    assert not (tmp_path / "ix.rebuild").exists()
    with EmbeddedBackend(tmp_path / "ix") as b:
        assert assert_committed_prefix(b, questions) == 10


# -- issue 34: once NAME is gone the swap is finished, never undone ---------------------------


def test_an_error_between_the_renames_finishes_the_swap(tmp_path, encoder, monkeypatch):
    """The second rename fails once (as EIO would): the cleanup finishes the swap instead of
    deleting the complete new index while NAME is missing."""
    questions = make_corpus(60)
    build(tmp_path / "ix", questions, encoder)
    build(tmp_path / "ix", questions, encoder)  # 60 dead rows for compaction to drop
    real, failed = os.replace, []

    def replace(src, dst):
        if str(src).endswith(".rebuild") and not failed:
            failed.append(src)
            raise OSError(5, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with EmbeddedBackend(tmp_path / "ix") as b, pytest.raises(OSError):
        b.compact()
    assert failed and sorted(os.listdir(tmp_path)) == ["ix"]
    with EmbeddedBackend(tmp_path / "ix") as b:
        assert b.storage() == {"vector_rows": 60, "dead_vector_rows": 0}  # the new index
        assert assert_committed_prefix(b, questions) == 60
        assert vector_mismatches(b, encoder, questions) == 0


def test_an_open_between_the_renames_finishes_the_swap_and_no_writer_slips_in(
    tmp_path, encoder, monkeypatch
):
    """A reader opening while NAME is missing finishes the swap; the writer's own second
    rename then finds it done, which is no failure; another writer is still turned away."""
    questions = make_corpus(60)
    build(tmp_path / "ix", questions, encoder)
    build(tmp_path / "ix", questions, encoder)
    real, during = os.replace, {}

    def replace(src, dst):
        real(src, dst)
        if str(dst).endswith(".old") and not during:
            during["reader"] = EmbeddedBackend(tmp_path / "ix")
            during["count"] = during["reader"].count()
            second = EmbeddedBackend(tmp_path / "ix")
            try:
                with pytest.raises(BackendError, match="open for writing elsewhere"):
                    second.acquire_write_lock()
            finally:
                second.close()

    monkeypatch.setattr(os, "replace", replace)
    with EmbeddedBackend(tmp_path / "ix") as b:
        b.compact()  # no "ix.rebuild: No such file or directory"
        b.upsert(make_corpus(1, prefix="more"))  # still the index's writer after the swap
        b.commit()
    assert during["count"] == 60
    during["reader"].close()
    assert sorted(os.listdir(tmp_path)) == ["ix"]
    with EmbeddedBackend(tmp_path / "ix") as b:
        assert b.count() == 61 and b.storage()["dead_vector_rows"] == 0
        assert vector_mismatches(b, encoder, questions) == 0


def test_an_old_copy_left_alone_is_put_back_not_deleted(tmp_path, encoder):
    """Only NAME.old is left (what an older qres's cleanup made of a signal in the swap):
    the next writer puts it back and keeps every question, rather than creating an empty
    NAME and deleting NAME.old as a leftover."""
    questions = make_corpus(40)
    build(tmp_path / "ix", questions, encoder)
    os.replace(tmp_path / "ix", tmp_path / "ix.old")
    with EmbeddedBackend(tmp_path / "ix", create=True) as b:
        b.upsert(make_corpus(1, prefix="more"))
        b.commit()
        assert b.count() == 41
    assert sorted(os.listdir(tmp_path)) == ["ix"]
    with EmbeddedBackend(tmp_path / "ix") as b:
        assert vector_mismatches(b, encoder, questions) == 0
    # NAME there but holding no index (an older qres made it empty): NAME.old is left alone
    os.replace(tmp_path / "ix", tmp_path / "ix.old")
    (tmp_path / "ix").mkdir()
    with EmbeddedBackend(tmp_path / "ix", create=True) as b:
        b.acquire_write_lock()
    with EmbeddedBackend(tmp_path / "ix.old") as b:
        assert b.count() == 41


# -- 3: a long-lived reader sees the rebuilt index's vectors, not the old file's --------------


def test_a_long_lived_reader_follows_a_rebuild(run, tmp_path, model_dir, encoder):
    questions = make_corpus(300)
    write_tsv(tmp_path / "fwd.tsv", questions)
    extra = make_corpus(1, seed=5, prefix="new")
    write_tsv(tmp_path / "rev.tsv", extra + questions[::-1])  # every slot different
    ix = tmp_path / "ix"
    assert (
        run("--index-dir", ix, "index", tmp_path / "fwd.tsv", "--model", model_dir).exit_code == 0
    )
    reader = EmbeddedBackend(ix)
    pipeline = SearchPipeline(reader, encoder)
    by_id = {q.id: q for q in questions}

    def wrong_cosines() -> int:
        query = f"{questions[7].title} {questions[8].body}"
        hits = pipeline.search(query, 10, "dense")
        assert len(hits) == 10
        fresh = encoder.encode_questions([by_id[h.id] for h in hits]) @ encoder.encode_query(query)
        return sum(abs(h.cosine - c) > 2e-2 for h, c in zip(hits, fresh, strict=True))

    assert wrong_cosines() == 0  # the reader has mapped the vector file
    assert vector_mismatches(reader, encoder, questions) == 0
    result = run(
        "--index-dir", ix, "index", tmp_path / "rev.tsv", "--model", model_dir, "--rebuild"
    )
    assert result.exit_code == 0, result.output
    deadline = time.monotonic() + 10  # tantivy's own reload (by path) is asynchronous
    while reader.count() != 301 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reader.count() == 301
    assert wrong_cosines() == 0
    assert vector_mismatches(reader, encoder, questions) == 0
    reader.close()


def test_a_nearest_search_overlapping_a_swap_reads_the_new_index(tmp_path, encoder, monkeypatch):
    """The swap lands between the listing of the live rows and the lookup of their ids (as
    another thread of a server reopening the index would make it): the search finishes on
    the rows it listed, is read again on the new index, and never looks an old row's id up
    in the new index's map (a KeyError, a 500 in `qres serve`, issue 34)."""
    questions = make_corpus(100)
    build(tmp_path / "ix", questions, encoder)
    build(tmp_path / "ix", questions[:60], encoder)  # live rows 60-159, renumbered 0-99 next
    reader = EmbeddedBackend(tmp_path / "ix")
    query = encoder.encode_questions(questions[3:4])[0]
    before = [h.id for h in reader.nearest(query, 5)]
    assert before[0] == "q3"
    real, swapped = EmbeddedBackend._live_rows, []

    def live_rows_then_swap(self, *args):
        slots = real(self, *args)
        if self is reader and not swapped:
            swapped.append(1)
            with EmbeddedBackend(tmp_path / "ix") as writer:
                writer.compact()
            reader._follow_swaps()  # what a search in another thread does meanwhile
        return slots

    monkeypatch.setattr(EmbeddedBackend, "_live_rows", live_rows_then_swap)
    assert [h.id for h in reader.nearest(query, 5)] == before
    assert swapped and reader.storage()["dead_vector_rows"] == 0  # it follows the new index
    reader.close()


def test_a_swap_between_the_look_for_a_swap_and_the_look_for_a_commit_reloads_nothing(
    tmp_path, encoder, monkeypatch
):
    """A swap lands just after a read saw the index's directory unchanged: the look at
    tantivy's meta.json that follows sees the new index's commit, and reloading it would
    read the new index's renumbered rows into the old index's generation (a fetch answered
    with other questions than asked: a KeyError beside a writer that compacts). It reloads
    nothing; the read then finds the swap and is answered from the new index."""
    questions = make_corpus(100)
    build(tmp_path / "ix", questions, encoder)
    build(tmp_path / "ix", questions[:60], encoder)  # live rows 60-159, renumbered 0-99 next
    reader = EmbeddedBackend(tmp_path / "ix")
    ids = [q.id for q in questions]
    assert reader.fetch(ids).keys() == set(ids)  # each kept by its row, as searches keep them
    real_identity, swapped = embedded.identity_of, []

    def swap_after_the_look(path):
        seen = real_identity(path)
        if not swapped:
            swapped.append(1)
            with EmbeddedBackend(tmp_path / "ix") as writer:
                writer.compact()
        return seen

    monkeypatch.setattr(embedded, "identity_of", swap_after_the_look)
    found = reader.fetch(ids)  # its look at the directory sees the old one, then the swap
    assert swapped and {qid: q.title for qid, q in found.items()} == {
        q.id: q.title for q in questions
    }
    reader.close()


def test_a_read_that_fails_in_a_swap_is_read_again_and_other_failures_are_raised(
    tmp_path, encoder, monkeypatch
):
    questions = make_corpus(50)
    build(tmp_path / "ix", questions, encoder)
    reader = EmbeddedBackend(tmp_path / "ix")
    real, calls = EmbeddedBackend._vectors_at, []

    def fails_once_in_a_swap(self, *args):
        calls.append(1)
        if len(calls) == 1:
            with EmbeddedBackend(tmp_path / "ix") as writer:
                writer.compact()
            raise KeyError("a row of the index swapped out")
        return real(self, *args)

    monkeypatch.setattr(EmbeddedBackend, "_vectors_at", fails_once_in_a_swap)
    assert reader.vectors(["q1", "q2"])[1].tolist() == [True, True]
    assert len(calls) == 2

    def always_fails(self, *args):
        raise KeyError("a real bug")

    monkeypatch.setattr(EmbeddedBackend, "_vectors_at", always_fails)
    with pytest.raises(KeyError, match="a real bug"):
        reader.vectors(["q1"])  # no swap: raised at once, not hidden by retries
    reader.close()


# -- 4: a writer turned away changes nothing --------------------------------------------------


def test_a_rejected_second_writer_leaves_the_model_record_alone(tmp_path):
    questions = make_corpus(20)
    first = EmbeddedBackend(tmp_path / "ix", create=True)
    index_questions(first, questions[:10], encoder=TableEncoder({}, fingerprint="first"))
    first.upsert(questions[10:])  # still writing: holds the writer's lock
    second = EmbeddedBackend(tmp_path / "ix")
    with pytest.raises(BackendError, match="open for writing elsewhere in this process"):
        index_questions(second, questions, encoder=TableEncoder({}, dim=8, fingerprint="other"))
    meta = json.loads((tmp_path / "ix" / "meta.json").read_text())
    assert (meta["model_fingerprint"], meta["vector_dim"]) == ("first", 4)
    second.close()
    first.close()


# -- 5: a read-only index can be searched ------------------------------------------------------


def _read_only_runner():
    """Run a command with the index directory mounted read-only (a private mount namespace:
    root or user namespaces), or as a plain user after chmod; None where neither works."""
    if (
        shutil.which("unshare")
        and subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0
    ):
        return "unshare"
    if os.geteuid() != 0:
        return "chmod"
    return None


def test_a_read_only_index_is_searchable(run, tmp_path, model_dir):
    how = _read_only_runner()
    if how is None:
        pytest.skip("needs unshare (mount namespaces) or a non-root user to make a read-only dir")
    ix = tmp_path / "ix"
    corpus = write_tsv(tmp_path / "c.tsv", make_corpus(50))
    assert run("--index-dir", ix, "index", corpus, "--model", model_dir).exit_code == 0
    before = sorted(p.relative_to(ix) for p in ix.rglob("*"))
    query = make_corpus(50)[3].title

    def cli(*args):
        return f"import sys; from qres.cli import main; sys.argv = {['qres', *args]!r}; main()"

    code = cli("--index-dir", str(ix), "--json", "search", query)
    info = cli("--index-dir", str(ix), "--json", "info")

    outputs = []
    for snippet in (code, info):
        if how == "unshare":
            inner = f'mount --bind -o ro {ix} {ix} && exec {sys.executable} -c "$0"'
            cmd = ["unshare", "-rm", "sh", "-c", inner, snippet]
        else:
            subprocess.run(["chmod", "-R", "a-w", str(ix)], check=True)
            cmd = [sys.executable, "-c", snippet]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
        assert proc.returncode == 0, proc.stderr
        outputs.append(json.loads(proc.stdout))
    assert outputs[0]["results"][0]["id"] == "q3"
    assert outputs[0]["results"][0]["cosine"] is not None
    assert outputs[1]["questions"] == 50
    if how == "chmod":
        subprocess.run(["chmod", "-R", "u+w", str(ix)], check=True)
    assert sorted(p.relative_to(ix) for p in ix.rglob("*")) == before


def test_engine_errors_are_one_line(run, tmp_path, monkeypatch):
    corpus = write_tsv(tmp_path / "c.tsv", make_corpus(5))
    run("--index-dir", tmp_path / "ix", "index", corpus)

    def fail(*_args, **_kw):
        raise ValueError("Failed to acquire Lockfile: Read-only file system")

    monkeypatch.setattr(EmbeddedBackend, "candidates", fail)  # what the query path calls
    result = run("--index-dir", tmp_path / "ix", "search", "w1")
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert result.output.startswith("error: Failed to acquire Lockfile")

    def full(*_args, **_kw):
        raise OSError(28, "No space left on device", str(tmp_path / "ix" / "vectors.f16"))

    monkeypatch.setattr(EmbeddedBackend, "candidates", full)
    result = run("--index-dir", tmp_path / "ix", "search", "w1")
    assert result.exit_code == 1
    assert result.output == f"error: {tmp_path / 'ix' / 'vectors.f16'}: No space left on device\n"


# -- 6: missing engine files are an error, never an empty index --------------------------------


def test_a_missing_tantivy_meta_is_an_error_not_an_empty_index(run, tmp_path):
    corpus = write_tsv(tmp_path / "c.tsv", make_corpus(5))
    run("--index-dir", tmp_path / "ix", "index", corpus)
    (tmp_path / "ix" / "tantivy" / "meta.json").unlink()
    with pytest.raises(BackendError, match="damaged.*--rebuild"):
        EmbeddedBackend(tmp_path / "ix")
    result = run("--index-dir", tmp_path / "ix", "search", "w1")
    assert result.exit_code == 1 and "damaged" in result.output
    assert not (tmp_path / "ix" / "tantivy" / "meta.json").exists()
    result = run("--index-dir", tmp_path / "ix", "index", corpus)  # not silently re-created
    assert result.exit_code == 1 and "damaged" in result.output
    assert run("--index-dir", tmp_path / "ix", "index", corpus, "--rebuild").exit_code == 0


# -- 8: small ways bad input used to escape ----------------------------------------------------


@pytest.mark.parametrize("k", ["0", "-1"])
def test_k_below_one_is_refused(run, tmp_path, k):
    corpus = write_tsv(tmp_path / "c.tsv", make_corpus(150))
    run("--index-dir", tmp_path / "ix", "index", corpus)
    result = run("--index-dir", tmp_path / "ix", "search", "w1 w2 w3", "-k", k)
    assert result.exit_code == 2 and "-k" in result.output
    with EmbeddedBackend(tmp_path / "ix") as b, pytest.raises(ValueError, match="at least 1"):
        SearchPipeline(b).search("w1", int(k), "bm25")


@pytest.mark.parametrize("content", ["{}", "[]", '{"analyzer": "english"}', "not json"])
def test_damaged_index_metadata_is_one_clear_error(run, tmp_path, content):
    corpus = write_tsv(tmp_path / "c.tsv", make_corpus(5))
    run("--index-dir", tmp_path / "ix", "index", corpus)
    (tmp_path / "ix" / "meta.json").write_text(content)
    result = run("--index-dir", tmp_path / "ix", "search", "w1")
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert result.output.startswith(f"error: {tmp_path / 'ix' / 'meta.json'}: ")


def test_info_reports_the_index_when_its_model_is_missing(run, tmp_path, model_dir):
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    corpus = write_tsv(tmp_path / "c.tsv", make_corpus(20))
    run("--index-dir", tmp_path / "ix", "index", corpus, "--model", model)
    shutil.rmtree(model)
    result = run("--index-dir", tmp_path / "ix", "--json", "info")
    assert result.exit_code == 0, result.output
    details = json.loads(result.output)
    assert details["questions"] == 20
    assert details["model"]["dir"] == str(model) and "not found" in details["model"]["error"]


def test_bm25_search_ignores_another_model(run, tmp_path, model_dir):
    corpus = write_tsv(tmp_path / "c.tsv", make_corpus(20))
    other = write_model(tmp_path / "other", dim=8, seed=3)
    run("--index-dir", tmp_path / "ix", "index", corpus, "--model", model_dir)
    args = ("--index-dir", tmp_path / "ix", "--json", "search", make_corpus(20)[4].title)
    result = run(*args, "--mode", "bm25", "--model", other)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["results"][0]["id"] == "q4"
    assert run(*args, "--mode", "hybrid", "--model", other).exit_code == 1


# -- 9: dead vector rows are reported and reclaimed --------------------------------------------


def test_info_counts_dead_rows_and_compact_reclaims_them(run, tmp_path, model_dir, encoder):
    questions = make_corpus(100)
    corpus = write_tsv(tmp_path / "c.tsv", questions)
    for _ in range(3):
        run("--index-dir", tmp_path / "ix", "index", corpus, "--model", model_dir, "--rewrite")
    details = json.loads(run("--index-dir", tmp_path / "ix", "--json", "info").output)
    assert (details["vector_rows"], details["dead_vector_rows"]) == (300, 200)
    reader = EmbeddedBackend(tmp_path / "ix")  # a reader open across the compaction
    assert vector_mismatches(reader, encoder, questions) == 0
    result = run("--index-dir", tmp_path / "ix", "--json", "compact")
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["after"] == {"vector_rows": 100, "dead_vector_rows": 0}
    assert (tmp_path / "ix" / "vectors.f16").stat().st_size == 100 * encoder.dim * 2
    with EmbeddedBackend(tmp_path / "ix") as b:
        assert assert_committed_prefix(b, questions) == 100
        assert vector_mismatches(b, encoder, questions) == 0
        assert b.metadata()["model_fingerprint"] == encoder.fingerprint
    assert vector_mismatches(reader, encoder, questions) == 0
    reader.close()


def test_compaction_keeps_questions_without_vectors(tmp_path):
    with EmbeddedBackend(tmp_path / "ix", create=True) as b:
        b.upsert([Question("plain", "w1 w2", "")])
        b.upsert([Question("v", "w3", "")], np.ones((1, 4), np.float32) / 2)
        b.upsert([Question("v", "w3", "")], np.ones((1, 4), np.float32) / 2)
        b.commit()
        assert b.storage() == {"vector_rows": 2, "dead_vector_rows": 1}
        b.compact()
        assert b.count() == 2 and b.storage() == {"vector_rows": 1, "dead_vector_rows": 0}
        _, has = b.vectors(["plain", "v"])
        assert has.tolist() == [False, True]
        assert b.search("w1", 5)[0].id == "plain"


def test_a_crash_during_compaction_leaves_a_whole_index(tmp_path, encoder):
    """Killed at each step of a compaction, the index opens with every question and the
    right vectors (the old copy or the new one), and a later compaction still works."""
    questions = make_corpus(200)
    build(tmp_path / "ix", questions, encoder)
    build(tmp_path / "ix", questions, encoder)
    code = """
import os, sys
from qres.backends import embedded
step = int(sys.argv[2])
calls = []
real_replace = os.replace
def replace(a, b):
    calls.append(1)
    if len(calls) == step:
        os._exit(9)
    real_replace(a, b)
embedded.os.replace = replace
with embedded.EmbeddedBackend(sys.argv[1]) as b:
    b.compact()
"""
    for step in (1, 2, 3):  # before the first rename, between the renames, after both
        proc = python(code, tmp_path / "ix", step)
        assert proc.returncode in (0, 9), proc.stderr
        with EmbeddedBackend(tmp_path / "ix") as b:
            assert assert_committed_prefix(b, questions) == 200
            assert vector_mismatches(b, encoder, questions) == 0
    with EmbeddedBackend(tmp_path / "ix") as b:
        b.compact()
        assert b.storage() == {"vector_rows": 200, "dead_vector_rows": 0}


def test_indexing_compacts_by_itself_once_dead_rows_outnumber_live_ones(
    run, tmp_path, model_dir, encoder
):
    questions = make_corpus(600)
    corpus = write_tsv(tmp_path / "c.tsv", questions)
    args = (
        "--index-dir",
        tmp_path / "ix",
        "--json",
        "index",
        corpus,
        "--model",
        model_dir,
        "--rewrite",
    )
    reclaimed = [json.loads(run(*args).output)["compacted_dead_vector_rows"] for _ in range(4)]
    assert reclaimed == [0, 0, 1200, 0]  # 600 live, 1,200 dead: more dead than live
    with EmbeddedBackend(tmp_path / "ix") as b:
        assert b.storage() == {"vector_rows": 1200, "dead_vector_rows": 600}
        assert assert_committed_prefix(b, questions) == 600
        assert vector_mismatches(b, encoder, questions) == 0


def test_a_rebuild_with_many_repeated_ids_is_not_compacted_in_its_own_middle(
    run, tmp_path, model_dir, monkeypatch
):
    """Each id three times over: more dead rows than live ones at the end of a --rebuild,
    whose automatic compaction then failed ("a rebuild ... is already under way") and threw
    the rebuild away."""
    questions = make_corpus(400)
    corpus = write_tsv(tmp_path / "c.tsv", questions * 3)
    args = ("--index-dir", tmp_path / "ix", "--json", "index", corpus, "--model", model_dir)
    monkeypatch.setattr("qres.indexing.compaction.AUTO_COMPACT_MIN_DEAD_ROWS", 100)
    result = run(*args, "--rebuild")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["compacted_dead_vector_rows"] == 0
    again = run(*args)  # the next run compacts it
    assert json.loads(again.output)["compacted_dead_vector_rows"] == 800
    with EmbeddedBackend(tmp_path / "ix") as b:
        assert b.count() == 400


def test_files_left_by_a_writer_killed_in_mid_commit_do_not_block_the_next(tmp_path):
    """kill -9 inside tantivy's commit can leave a deletes file that no commit names; a
    re-run replays the same operations and would fail creating that file again."""
    questions = make_corpus(50)
    with EmbeddedBackend(tmp_path / "a", create=True) as b:
        b.upsert(questions)
        b.commit()
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # b: the state before the crashed commit
    engine_a, engine_b = tmp_path / "a" / "tantivy", tmp_path / "b" / "tantivy"
    before = set(os.listdir(engine_a))
    with EmbeddedBackend(tmp_path / "a") as b:
        b.upsert(questions[:10])  # replaces some questions: a deletes file for the segment
        b.commit()
    left = [n for n in set(os.listdir(engine_a)) - before if n.endswith(".del")]
    assert left
    for name in [*left, ".managed.json"]:  # what the crash left: the file, and its record
        shutil.copy(engine_a / name, engine_b / name)
    with EmbeddedBackend(tmp_path / "b") as b:
        b.upsert(questions[:10])
        b.commit()
        assert assert_committed_prefix(b, questions) == 50


def test_a_cut_vector_file_is_named_damaged_and_nothing_writes_over_it(tmp_path):
    from click.testing import CliRunner

    from qres.cli import cli

    model = Path(__file__).resolve().parents[1] / "qres" / "models" / "default"
    corpus = tmp_path / "forum.tsv"
    corpus.write_text(
        "id\ttitle\tbody\n"
        + "".join(f"q{i}\tquestion {i} about visas\tbody {i} schengen\n" for i in range(20))
    )
    ix = tmp_path / "ix"
    run = lambda *a: CliRunner().invoke(cli, [*map(str, a), "--index-dir", str(ix)])  # noqa: E731
    assert run("index", corpus, "--model", model).exit_code == 0
    vectors = ix / "vectors.f16"
    with open(vectors, "r+b") as f:
        f.truncate(vectors.stat().st_size // 2)
    cut = vectors.read_bytes()
    more = tmp_path / "more.tsv"
    more.write_text("id\ttitle\tbody\nnew1\tanother question\tabout trains\n")
    for args in (
        ("info",),
        ("search", "visas", "--mode", "dense"),
        ("index", more, "--add-to-existing", "--model", model),
        ("compact",),
    ):
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        (line,) = result.output.strip().splitlines()
        assert line.startswith(f"error: {vectors}: the vector file is damaged (it ends at row 10")
        assert "--rebuild" in line
        assert vectors.read_bytes() == cut  # nothing appended over the rows questions use
