import pytest

from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import CorpusError, Question, read_corpus
from qres.indexing.pipeline import index_questions


def write_tsv(path, rows):
    path.write_text("id\ttitle\tbody\n" + "".join(f"{i}\t{t}\t{b}\n" for i, t, b in rows))


def test_reindexing_is_idempotent(tmp_path):
    corpus = tmp_path / "c.tsv"
    write_tsv(corpus, [(f"q{i}", f"title {i}", "body words") for i in range(30)])
    b = EmbeddedBackend(tmp_path / "ix", create=True)
    for run in range(2):
        report = index_questions(b, read_corpus(corpus), batch_size=7, skip_unchanged=True)
        # the second run finds every question stored as it is: nothing is written again
        assert (report.indexed, report.unchanged) == ((30, 0) if run == 0 else (0, 30))
    assert b.count() == 30
    write_tsv(
        corpus, [(f"q{i}", f"title {i}", "new body" if i == 3 else "body words") for i in range(30)]
    )
    done = []  # what the progress bar is told: every question read, stored as it is or not
    report = index_questions(
        b, read_corpus(corpus), batch_size=7, skip_unchanged=True, on_encoded=done.append
    )
    assert (report.indexed, report.unchanged) == (1, 29) and sum(done) == 30
    assert b.fetch(["q3"])["q3"].body == "new body" and b.count() == 30
    b.close()


def test_a_changed_answer_count_is_written_again(tmp_path):
    corpus = tmp_path / "c.jsonl"
    line = '{{"id": "q{}", "title": "title {}", "answer_count": {}}}\n'
    corpus.write_text("".join(line.format(i, i, 1) for i in range(10)))
    b = EmbeddedBackend(tmp_path / "ix", create=True)
    assert index_questions(b, read_corpus(corpus), skip_unchanged=True).indexed == 10
    corpus.write_text("".join(line.format(i, i, 2 if i == 4 else 1) for i in range(10)))
    report = index_questions(b, read_corpus(corpus), skip_unchanged=True)
    assert (report.indexed, report.unchanged) == (1, 9)
    assert b.fetch(["q4"])["q4"].extras == {"answer_count": 2}
    b.close()


def test_duplicate_ids_are_counted_and_the_last_wins(tmp_path):
    b = EmbeddedBackend(tmp_path / "ix", create=True)
    qs = [Question("a", "old", ""), Question("b", "x", ""), Question("a", "new", "")]
    report = index_questions(b, qs, batch_size=2)
    assert (report.indexed, report.duplicates) == (2, 1)
    assert b.fetch(["a"])["a"].title == "new"
    b.close()


def test_bad_line_keeps_what_came_before_and_rerun_completes(tmp_path):
    corpus = tmp_path / "c.tsv"
    rows = [(f"q{i}", f"title {i}", "body") for i in range(10)]
    corpus.write_text(
        "id\ttitle\tbody\n"
        + "".join(f"{i}\t{t}\t{b}\n" for i, t, b in rows[:6])
        + "broken line without tabs\n"
        + "".join(f"{i}\t{t}\t{b}\n" for i, t, b in rows[6:])
    )
    b = EmbeddedBackend(tmp_path / "ix", create=True)
    with pytest.raises(CorpusError, match=r"c\.tsv:8: expected 3"):
        index_questions(b, read_corpus(corpus), batch_size=4)
    assert b.count() == 6  # every good question before the bad line was kept
    index_questions(b, read_corpus(corpus, skip_bad=True), batch_size=4)
    assert b.count() == 10
    b.close()


@pytest.mark.parametrize("failure", [OSError("disk read error"), EOFError(), RuntimeError("bug")])
def test_any_reader_failure_keeps_the_questions_read_before_it(tmp_path, failure):
    def reader():
        yield from (Question(f"q{i}", f"title {i}", "body") for i in range(5))
        raise failure

    b = EmbeddedBackend(tmp_path / "ix", create=True)
    with pytest.raises(type(failure)):
        index_questions(b, reader(), batch_size=256)
    assert b.count() == 5
    b.close()
