"""``qres index FILE --prune`` and ``Index.add(FILE, prune=True)``: the questions a newer dump
of a forum no longer holds leave the index, and only a whole, clean read of the file prunes."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from qres import Index, SearchPipeline
from qres.backends.base import BackendError

MODEL = Path(__file__).resolve().parents[1] / "qres" / "models" / "default"
HEADER = "id\ttitle\tbody\n"
ROWS = {
    "q1": "q1\tWifi drops after suspend\tEvery ten minutes the card reconnects.\n",
    "q2": "q2\tGrub menu gone\tThe boot menu no longer shows.\n",
    "q3": "q3\tNo sound after the update\tSpeakers are silent since the kernel update.\n",
    "q4": "q4\tPrinter stopped printing\tJobs stay in the queue.\n",
}


def write(path: Path, ids, extra: str = "") -> Path:
    path.write_text(HEADER + "".join(ROWS[i] for i in ids) + extra)
    return path


def held(run, index_dir) -> int:
    return json.loads(run("--json", "info", "--index-dir", index_dir).output)["questions"]


def found(index_dir, text: str, mode: str = "bm25") -> set[str]:
    results = SearchPipeline.open(index_dir).search(text, k=10, mode=mode, with_text=False)
    return {r.id for r in results}


def test_the_questions_a_newer_file_no_longer_holds_leave_the_index(run, tmp_path):
    corpus, index_dir = tmp_path / "forum.tsv", tmp_path / "ix"
    assert (
        run("index", write(corpus, ROWS), "--index-dir", index_dir, "--model", MODEL).exit_code == 0
    )
    assert "q3" in found(index_dir, "sound speakers silent", "hybrid")
    write(corpus, ["q1", "q2", "q4"])  # the forum deleted q3
    result = run("index", corpus, "--index-dir", index_dir, "--prune")
    assert result.exit_code == 0, result.output
    assert "pruned 1 question forum.tsv no longer holds" in result.output
    assert held(run, index_dir) == 3
    for mode in ("bm25", "dense", "hybrid"):  # gone from BM25's candidates and the nearest
        assert "q3" not in found(index_dir, "sound speakers silent", mode)
    summary = json.loads(run("index", corpus, "--index-dir", index_dir, "--prune", "--json").output)
    assert (summary["pruned"], summary["index_size"]) == (0, 3)  # nothing more to prune


@pytest.mark.parametrize("flag", ["--rebuild", "--add-to-existing"])
def test_prune_with_a_rebuild_or_a_mix_is_a_usage_error(run, tmp_path, flag):
    corpus = write(tmp_path / "forum.tsv", ROWS)
    result = run("index", corpus, "--index-dir", tmp_path / "ix", "--prune", flag)
    assert result.exit_code == 2
    assert "--prune goes without --rebuild and --add-to-existing" in result.output


def test_a_file_cut_short_prunes_nothing(run, tmp_path):
    """Most of the index gone from the file is a truncated download, not a forum's deletions."""
    corpus, index_dir = tmp_path / "forum.tsv", tmp_path / "ix"
    run("index", write(corpus, ROWS), "--index-dir", index_dir)
    result = run("index", write(corpus, ["q1"]), "--index-dir", index_dir, "--prune")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"error: --prune would delete 3 of the 4 questions held (75%): is {corpus} whole? "
        "Nothing was pruned (the questions read are indexed); --rebuild makes the index hold "
        "exactly the file's questions"
    )
    assert held(run, index_dir) == 4


def test_a_run_that_skipped_a_malformed_record_prunes_nothing(run, tmp_path):
    corpus, index_dir = tmp_path / "forum.tsv", tmp_path / "ix"
    run("index", write(corpus, ROWS), "--index-dir", index_dir)
    write(corpus, ["q1", "q2", "q4"], extra="q5\tonly a title\n")  # q3 deleted, q5 malformed
    result = run("index", corpus, "--index-dir", index_dir, "--prune", "--skip-bad")
    assert result.exit_code == 1
    assert "--prune: 1 malformed record was skipped" in result.output
    assert "nothing was pruned (the questions read are indexed)" in result.output
    assert held(run, index_dir) == 4


def test_a_run_stopped_by_a_malformed_record_prunes_nothing(run, tmp_path):
    corpus, index_dir = tmp_path / "forum.tsv", tmp_path / "ix"
    run("index", write(corpus, ROWS), "--index-dir", index_dir)
    write(corpus, ["q1"], extra="q5\tonly a title\n" + ROWS["q2"])
    result = run("index", corpus, "--index-dir", index_dir, "--prune")
    assert result.exit_code == 1 and "forum.tsv:3" in result.output
    assert held(run, index_dir) == 4


def test_an_index_of_several_files_is_not_pruned_by_one(run, tmp_path):
    index_dir = tmp_path / "ix"
    run("index", write(tmp_path / "a.tsv", ["q1", "q2"]), "--index-dir", index_dir)
    mixed = run(
        "index", write(tmp_path / "b.tsv", ["q3"]), "--index-dir", index_dir, "--add-to-existing"
    )
    assert mixed.exit_code == 0
    result = run(
        "index", write(tmp_path / "a.tsv", ["q1", "q4"]), "--index-dir", index_dir, "--prune"
    )
    assert result.exit_code == 1
    assert "--prune: this index holds the questions of " in result.output
    assert "b.tsv too, which " in result.output and "nothing was indexed" in result.output
    assert held(run, index_dir) == 3  # q4 not added either


def test_index_add_prunes_from_python(tmp_path, monkeypatch):
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    corpus = write(tmp_path / "forum.tsv", ROWS)
    with Index.open(tmp_path / "ix") as index:
        assert index.add(corpus).pruned == 0
        report = index.add(write(corpus, ["q1", "q2", "q4"]), prune=True)
        assert (report.pruned, index.count()) == (1, 3)
        with pytest.raises(ValueError, match="prune: a corpus file's questions alone"):
            index.add([], prune=True)
        write(corpus, ["q1"])
        with pytest.raises(BackendError, match="would delete 2 of the 3 questions held"):
            index.add(corpus, prune=True)
        assert index.count() == 3


def test_ctrl_c_as_the_deletions_commit_waits_for_them_and_says_the_run_was_done(
    run, tmp_path, monkeypatch
):
    """A Ctrl-C that landed as the deletions were committed said "this run committed no
    questions (the index holds 4,919)" of an index left holding 4,619: the deletions were in,
    and the count was read before the index saw them."""
    from qres.backends.embedded import EmbeddedBackend

    corpus, index_dir = tmp_path / "forum.tsv", tmp_path / "ix"
    run("index", write(corpus, ROWS), "--index-dir", index_dir)
    write(corpus, ["q1", "q2", "q4"])
    real_commit, real_delete, deleting = EmbeddedBackend.commit, EmbeddedBackend.delete, []

    def noted(self, ids):
        deleting.append(ids)
        real_delete(self, ids)

    def pressed_while_committing(self):
        if deleting:  # the deletions' commit, not an earlier one
            signal.raise_signal(signal.SIGINT)  # the terminal's Ctrl-C, as it lands
        real_commit(self)

    monkeypatch.setattr(EmbeddedBackend, "delete", noted)
    monkeypatch.setattr(EmbeddedBackend, "commit", pressed_while_committing)
    result = run("index", corpus, "--index-dir", index_dir, "--prune")
    assert result.exit_code == 130, result.output
    assert result.output.splitlines()[-1] == (
        "interrupted: the run was done: 0 questions committed and 1 that the file no longer "
        "holds pruned; the index holds 3"
    )
    assert held(run, index_dir) == 3
