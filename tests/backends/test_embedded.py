import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from qres.backends.base import BackendError
from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import Question

from .contract import QUESTIONS, BackendContract, vectors_for


@pytest.fixture
def make_backend(tmp_path):
    def make(name, reopen=False):
        return EmbeddedBackend(tmp_path / name, create=not reopen)

    return make


class TestEmbeddedContract(BackendContract):
    pass


def test_opening_a_missing_index_says_how_to_create_it(tmp_path):
    with pytest.raises(BackendError, match="qres index"):
        EmbeddedBackend(tmp_path / "none")


def test_vector_dimension_mismatch_is_refused(tmp_path):
    b = EmbeddedBackend(tmp_path / "ix", create=True)
    b.upsert(QUESTIONS[:1], vectors_for(1, dim=4))
    with pytest.raises(BackendError, match="--rebuild"):
        b.upsert(QUESTIONS[1:2], vectors_for(1, dim=8))
    b.close()


def test_float32_store(tmp_path):
    b = EmbeddedBackend(tmp_path / "ix", create=True, vector_dtype="float32")
    v = vectors_for(5)
    b.upsert(QUESTIONS, v)
    b.commit()
    np.testing.assert_array_equal(b.vectors(["u2"])[0][0], v[1])
    b.close()


def test_plain_analyzer_does_not_stem(tmp_path):
    b = EmbeddedBackend(tmp_path / "ix", create=True, analyzer="plain")
    b.upsert([Question("a", "booting", "")])
    b.commit()
    assert b.search("boot", 5) == []
    assert [h.id for h in b.search("booting", 5)] == ["a"]


def test_killed_writer_keeps_committed_questions_and_rerun_completes(tmp_path):
    """A process killed mid-batch loses only its uncommitted work; re-running finishes it."""
    path = tmp_path / "ix"
    script = textwrap.dedent(
        f"""
        import os, numpy as np
        from qres.backends.embedded import EmbeddedBackend
        from qres.corpus.readers import Question
        b = EmbeddedBackend({str(path)!r}, create=True)
        b.upsert([Question(f"q{{i}}", f"title {{i}} usb", "body") for i in range(50)],
                 np.ones((50, 4), np.float32))
        b.commit()
        b.upsert([Question(f"q{{i}}", f"title {{i}} usb", "body") for i in range(50, 100)],
                 np.ones((50, 4), np.float32))
        os._exit(9)  # killed before the second commit
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], env=os.environ.copy())
    assert proc.returncode == 9
    b = EmbeddedBackend(path)
    assert b.count() == 50
    # The re-run writes everything again: no duplicates, nothing lost, vectors consistent.
    qs = [Question(f"q{i}", f"title {i} usb", "body") for i in range(100)]
    b.upsert(qs, np.full((100, 4), 0.5, np.float32))
    b.commit()
    assert b.count() == 100
    vectors, has = b.vectors([q.id for q in qs])
    assert has.all() and np.allclose(vectors, 0.5)
    b.close()


def test_nearest_stays_exact_through_every_kind_of_write(tmp_path):
    """nearest() lists the live rows once per index state (cached, keyed by the live slots'
    count, sum and maximum): after adds, replacements, deletions, questions without vectors
    and a compaction it still equals the exact top k over the live questions, in the writing
    backend and in a reader of the same directory that stays open throughout."""
    rng = np.random.default_rng(5)
    dim, live, next_id = 8, {}, [0]

    def unit(n):
        v = rng.normal(size=(n, dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def add(backend, ids, vectors=True):
        questions = [Question(i, f"question {i}", "body") for i in ids]
        if vectors:
            rows = unit(len(ids))
            backend.upsert(questions, rows)
            live.update(zip(ids, rows, strict=True))
        else:
            backend.upsert(questions)
            for i in ids:
                live.pop(i, None)

    def fresh(n):
        next_id[0] += n
        return [f"q{i}" for i in range(next_id[0] - n, next_id[0])]

    def exact(query, k=10):
        ids = list(live)
        scores = np.array([live[i] for i in ids]) @ query
        order = sorted(range(len(ids)), key=lambda j: -scores[j])[:k]
        return [ids[j] for j in order]

    def nearest_ids(backend, query):
        # float16 storage: compare ids, not scores (the random scores are far from ties)
        return [h.id for h in backend.nearest(query, 10)]

    writer = EmbeddedBackend(tmp_path / "ix", create=True)
    add(writer, fresh(40))
    writer.commit()
    reader = EmbeddedBackend(tmp_path / "ix")
    query = unit(1)[0]
    assert nearest_ids(reader, query) == nearest_ids(writer, query) == exact(query)
    best = exact(query)
    writes = [
        lambda: add(writer, fresh(5)),  # new rows
        lambda: add(writer, best[:3]),  # replaced: their old rows dead, new ones appended
        lambda: (writer.delete(best[3:5]), [live.pop(i) for i in best[3:5]]),
        # one deleted and one added without a vector: the count stays the same
        lambda: (
            writer.delete([exact(query)[0]]),
            live.pop(exact(query)[0]),
            add(writer, fresh(1), vectors=False),
        ),
        lambda: writer.compact(),  # rows renumbered
        lambda: add(writer, fresh(2)),
    ]
    for step, write in enumerate(writes):
        write()
        writer.commit()
        want = exact(query)
        assert nearest_ids(writer, query) == want, f"writer after write {step}"
        deadline = time.monotonic() + 10  # a reader sees a commit after a short delay
        while nearest_ids(reader, query) != want and time.monotonic() < deadline:
            time.sleep(0.05)
        assert nearest_ids(reader, query) == want, f"reader after write {step}"
    reader.close()
    writer.close()


def test_nearest_over_many_rows_finds_the_exact_top_k_through_its_int8_scan(tmp_path):
    """With far more live rows than the int8 scan's shortlist, nearest() still returns the
    exact top k by the stored vectors' cosine, best first, with those cosines as scores."""
    rng = np.random.default_rng(11)
    n, dim, k = 3_000, 64, 10
    rows = rng.normal(size=(n, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    ids = [f"q{i}" for i in range(n)]
    with EmbeddedBackend(tmp_path / "ix", create=True) as backend:
        backend.upsert([Question(i, f"question {i}", "body") for i in ids], rows)
        backend.commit()
        stored = rows.astype(np.float16).astype(np.float32)  # what the index keeps
        for _ in range(20):
            query = rng.normal(size=dim).astype(np.float32)
            query /= np.linalg.norm(query)
            cosines = stored @ query
            want = [ids[i] for i in np.argsort(-cosines, kind="stable")[:k]]
            hits = backend.nearest(query, k)
            assert [h.id for h in hits] == want
            assert [h.score for h in hits] == pytest.approx(sorted(cosines, reverse=True)[:k])


def test_quantised_rows_keep_each_component_within_half_a_step():
    from qres.backends.embedded.vectors import quantise_rows

    rows = np.random.default_rng(3).normal(size=(50, 32)).astype(np.float32)
    rows[7] = 0.0  # a zero row (padding) stays zero
    quantised, scales = quantise_rows(rows)
    restored = (quantised.astype(np.float32) - 128) * scales[:, None]
    assert quantised.dtype == np.uint8 and restored[7].tolist() == [0.0] * 32
    assert np.all(np.abs(restored - rows) <= scales[:, None] / 2 + 1e-6)


def test_float16_rows_read_as_float32_exactly_above_and_below_the_session_threshold():
    """Stored rows read through onnxruntime's Cast are the values numpy's own conversion
    gives, bit for bit, for every float16 (infinities, zeros of both signs and subnormals
    included; a NaN stays a NaN): the scores computed from them cannot move."""
    from qres.backends.embedded.vectors import _CAST_MIN_VALUES, as_float32

    every_half = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    for rows in (every_half.reshape(-1, 256), every_half[:1_024].reshape(-1, 64)):
        assert (rows.size >= _CAST_MIN_VALUES) == (rows.shape[1] == 256)
        got = as_float32(rows)
        assert got.dtype == np.float32 and got.shape == rows.shape
        want = rows.astype(np.float32)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan) and nan.sum() == 2 * 1_023 * (rows.size > 1_024)
        assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
