import os
import subprocess
import sys
import textwrap

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
