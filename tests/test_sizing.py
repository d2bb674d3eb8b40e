"""The estimated question count behind `qres index`'s total and time left: it matches what
the readers read on real and written files, through chunk boundaries and gzip."""

from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path

import pytest

from qres.corpus.readers import read_corpus
from qres.corpus.sizing import count_beside, count_questions

TRAVEL = Path(__file__).resolve().parents[2] / "shared" / "data" / "stackexchange-travel"


def test_a_dump_is_counted_by_its_question_rows_as_the_reader_reads_them():
    posts = TRAVEL / "Posts.xml"
    assert posts.is_file(), f"{posts} is missing: the shared data is beside the checkout"
    read = sum(1 for _ in read_corpus(posts, "stackexchange"))
    assert count_questions(posts, "stackexchange") == read
    # a chunk that cuts rows (and the marker) anywhere counts the same
    assert count_questions(posts, "stackexchange", chunk=4097) == read


@pytest.mark.parametrize("fmt, header", [("tsv", "id\ttitle\tbody\n"), ("jsonl", "")])
@pytest.mark.parametrize("last_line_end", ["\n", ""])
def test_lines_are_counted_less_a_header_gzipped_or_not(tmp_path, fmt, header, last_line_end):
    rows = [
        f"q{n}\tt {n}\tb {n}" if fmt == "tsv" else f'{{"id": "q{n}", "title": "t", "body": "b"}}'
        for n in range(1000)
    ]
    text = header + "\n".join(rows) + last_line_end
    plain, packed = tmp_path / f"c.{fmt}", tmp_path / f"c.{fmt}.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    for path in (plain, packed):
        assert count_questions(path, fmt, chunk=333) == 1000
        assert sum(1 for _ in read_corpus(path, fmt)) == 1000


def test_what_is_not_counted(tmp_path):
    assert count_questions("-", "tsv") is None  # standard input: read once only
    read, write = os.pipe()  # /dev/stdin or <(...): a pipe the reader alone may read
    os.write(write, b"id\ttitle\tbody\nq1\tt\tb\n")
    assert count_questions(f"/dev/fd/{read}", "tsv") is None
    assert os.read(read, 100).startswith(b"id\t")  # nothing was taken from it
    os.close(read), os.close(write)
    assert count_questions(tmp_path / "absent.tsv", "tsv") is None
    (tmp_path / "c.xml").write_text("<xml/>")
    assert count_questions(tmp_path / "c.xml", "semeval-xml") is None
    (tmp_path / "broken.tsv.gz").write_bytes(b"\x1f\x8b not gzip")
    assert count_questions(tmp_path / "broken.tsv.gz", "tsv") is None


def test_the_count_arrives_from_a_thread_of_its_own(tmp_path):
    corpus = tmp_path / "c.tsv"
    corpus.write_text("id\ttitle\tbody\n" + "".join(f"q{n}\tt\tb\n" for n in range(5)))
    got, arrived = [], threading.Event()
    count_beside(
        corpus, "tsv", lambda n: (got.append((n, threading.current_thread())), arrived.set())
    )
    assert arrived.wait(10)
    assert got[0][0] == 5 and got[0][1] is not threading.main_thread()


def test_qres_index_s_bar_gets_the_count_as_its_total_and_ends_full(tmp_path):
    from rich.progress import Progress

    from qres.cli.output import QuestionsDone

    corpus = tmp_path / "c.tsv"
    corpus.write_text("id\ttitle\tbody\n" + "".join(f"q{n}\tt\tb\n" for n in range(5)))
    with Progress(disable=True) as progress:
        done = QuestionsDone(progress, corpus, "tsv")
        (task,) = progress.tasks
        for _ in range(1000):  # the count arrives from its thread
            if task.total is not None:
                break
            threading.Event().wait(0.01)
        assert task.total == 5 and task.description == "indexing c.tsv"
        done(3)  # two lines were skipped as bad, say
        assert task.completed == 3 and task.fields["rate"].endswith("questions/s")
        done.finish()
        assert task.total == task.completed == 3


def test_once_every_question_is_encoded_the_bar_says_it_is_committing(tmp_path):
    """It sat at the full count and 0:00:00 left, saying nothing, while the last batches were
    written and committed."""
    from rich.progress import Progress

    from qres.cli.output import QuestionsDone

    corpus = tmp_path / "c.tsv"
    corpus.write_text("id\ttitle\tbody\n" + "".join(f"q{n}\tt\tb\n" for n in range(5)))
    with Progress(disable=True) as progress:
        done = QuestionsDone(progress, corpus, "tsv")
        (task,) = progress.tasks
        for _ in range(1000):  # the count arrives from its thread
            if task.total is not None:
                break
            threading.Event().wait(0.01)
        done(4)
        assert task.description == "indexing c.tsv"
        done(1)
        assert task.description == "committing c.tsv"
        done.finish()
        assert task.description == "indexed c.tsv"
