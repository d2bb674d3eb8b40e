"""Several vectors per question (issue 15, item 4): an embedded index of several models keeps
one aligned vector file per model, adds a model by computing only that model's vectors, and
keeps the crash guarantees of a one-model index (torn rows, kill -9, compaction)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from qres.backends.base import BackendError
from qres.backends.embedded import EmbeddedBackend
from qres.encoders.runtime import Encoder
from qres.indexing.pipeline import index_questions
from tests.safety_helpers import (
    assert_committed_prefix,
    make_corpus,
    python,
    write_model,
    write_tsv,
)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return write_model(root / "a", dim=16, seed=0), write_model(root / "b", dim=8, seed=1)


@pytest.fixture(scope="module")
def encoders(models):
    return Encoder.load(models[0]), Encoder.load(models[1])


class Counting:
    """An encoder that counts the questions it encodes, by way of either bulk interface."""

    def __init__(self, encoder):
        self.inner, self.encoded = encoder, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode_questions(self, questions, *args):
        self.encoded += len(questions)
        return self.inner.encode_questions(questions, *args)

    def encode_tokens(self, tokens, *args, **kwargs):
        self.encoded += len(tokens)
        return self.inner.encode_tokens(tokens, *args, **kwargs)


def mismatches(backend, encoder, questions) -> int:
    """Questions whose vector of ``encoder``'s model is missing or unlike a fresh encoding."""
    got, has = backend.vectors([q.id for q in questions], model=encoder.fingerprint)
    close = np.abs(got - encoder.encode_questions(questions)).max(axis=1) < 2e-2
    return int((~(has & close)).sum())


def build(path, questions, encoders, **kwargs):
    with EmbeddedBackend(path, create=True) as b:
        index_questions(b, questions, encoder=list(encoders), batch_size=50, **kwargs)


def vector_file(path, encoder):
    return path / f"vectors-{encoder.fingerprint[:16]}.f16"


def test_two_models_keep_one_aligned_vector_file_each(tmp_path, encoders):
    a, b = encoders
    questions = make_corpus(200)
    build(tmp_path / "ix", questions, encoders)
    with EmbeddedBackend(tmp_path / "ix") as ix:
        assert ix.vector_models() == [a.fingerprint, b.fingerprint]
        assert mismatches(ix, a, questions) == mismatches(ix, b, questions) == 0
        meta = ix.metadata()
    assert meta["format"] == 3  # an older qres refuses it instead of ignoring model b
    assert meta["more_models"][0]["vector_dim"] == 8
    assert (tmp_path / "ix" / "vectors.f16").stat().st_size == 200 * 16 * 2
    assert vector_file(tmp_path / "ix", b).stat().st_size == 200 * 8 * 2


def test_adding_a_model_computes_only_its_vectors(tmp_path, encoders):
    a, b = encoders
    questions = make_corpus(120)
    build(tmp_path / "ix", questions, [a])
    with EmbeddedBackend(tmp_path / "ix") as ix:
        before, _ = ix.vectors([q.id for q in questions])
        assert ix.metadata()["format"] == 2  # a one-model index keeps the one-model layout
    counted_a, counted_b = Counting(a), Counting(b)
    build(tmp_path / "ix", [], [counted_a, counted_b])
    assert counted_a.encoded == 0 and counted_b.encoded == 120
    with EmbeddedBackend(tmp_path / "ix") as ix:
        after, _ = ix.vectors([q.id for q in questions], model=a.fingerprint)
        assert np.array_equal(before, after)  # copied, not recomputed
        assert mismatches(ix, b, questions) == 0
        assert ix.vector_models() == [a.fingerprint, b.fingerprint]
        assert ix.storage() == {"vector_rows": 120, "dead_vector_rows": 0}
    # and new questions then get both vectors
    more = make_corpus(30, seed=5, prefix="n")
    build(tmp_path / "ix", more, [b, a])  # any order: vectors are matched by fingerprint
    with EmbeddedBackend(tmp_path / "ix") as ix:
        assert ix.count() == 150
        assert mismatches(ix, a, questions + more) == mismatches(ix, b, questions + more) == 0


def test_every_model_of_the_index_must_be_given(tmp_path, encoders):
    a, b = encoders
    build(tmp_path / "ix", make_corpus(20), encoders)
    with pytest.raises(BackendError) as err:
        build(tmp_path / "ix", make_corpus(5, seed=3, prefix="x"), [a])
    assert f"model {b.fingerprint[:12]}" in str(err.value) and "\n" not in str(err.value)
    with EmbeddedBackend(tmp_path / "ix") as ix:
        assert ix.count() == 20  # nothing written


def test_a_model_with_other_dims_than_the_index_holds_is_refused(tmp_path, encoders):
    from tests.fakes import TableEncoder

    a, b = encoders
    build(tmp_path / "ix", make_corpus(20), encoders)
    wrong_b = TableEncoder({}, dim=4, fingerprint=b.fingerprint)
    with pytest.raises(BackendError, match=r"gives 4 dimensions but the index holds 8 for it"):
        build(tmp_path / "ix", make_corpus(5, seed=3, prefix="x"), [a, wrong_b])
    with EmbeddedBackend(tmp_path / "ix") as ix, pytest.raises(BackendError, match="8 for model"):
        ix.upsert(
            make_corpus(1, prefix="y"),
            {a.fingerprint: np.ones((1, 16)), b.fingerprint: np.ones((1, 4))},
        )


def test_a_torn_row_in_the_second_vector_file_is_cut_off(tmp_path, encoders):
    a, b = encoders
    questions = make_corpus(300)
    build(tmp_path / "ix", questions[:150], encoders)
    with open(vector_file(tmp_path / "ix", b), "ab") as f:
        f.write(b"\0" * 7)  # a crash in the middle of model b's row
    build(tmp_path / "ix", questions, encoders)
    with EmbeddedBackend(tmp_path / "ix") as ix:
        assert ix.count() == 300
        assert mismatches(ix, a, questions) == mismatches(ix, b, questions) == 0


def test_vector_files_of_unequal_length_are_realigned_before_the_next_append(tmp_path, encoders):
    """A crash after model a's rows were written but before model b's leaves a longer first
    file; appending after that must not give the two models different slots."""
    a, b = encoders
    questions = make_corpus(200)
    build(tmp_path / "ix", questions[:100], encoders)
    with open(tmp_path / "ix" / "vectors.f16", "ab") as f:
        f.write(b"\1" * (16 * 2 * 3 + 5))  # three whole uncommitted rows and a torn one
    build(tmp_path / "ix", questions, encoders)
    with EmbeddedBackend(tmp_path / "ix") as ix:
        assert mismatches(ix, a, questions) == mismatches(ix, b, questions) == 0
        assert ix.storage()["dead_vector_rows"] == 100 + 3  # the replaced rows and the crash's
        ix.compact()
        assert ix.storage() == {"vector_rows": 200, "dead_vector_rows": 0}
        assert mismatches(ix, a, questions) == mismatches(ix, b, questions) == 0
    assert vector_file(tmp_path / "ix", b).stat().st_size == 200 * 8 * 2


def test_a_failed_add_leaves_the_index_as_it_was(tmp_path, encoders):
    a, b = encoders
    questions = make_corpus(80)
    build(tmp_path / "ix", questions, [a])

    class Failing(Counting):
        def encode_questions(self, questions, *args):
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        build(tmp_path / "ix", [], [a, Failing(b)])
    assert sorted(os.listdir(tmp_path)) == ["ix"]  # the half-built copy is gone
    with EmbeddedBackend(tmp_path / "ix") as ix:
        assert ix.vector_models() == [a.fingerprint] and ix.count() == 80
        assert mismatches(ix, a, questions) == 0


def test_several_models_need_a_backend_that_stores_a_vector_per_model(encoders):
    class OneModel:  # a backend without several_models (both shipped backends have it)
        name = "one-model"

    with pytest.raises(BackendError, match="several --model need a backend that stores a vector"):
        index_questions(OneModel(), [], encoder=list(encoders))


# Indexes with two models and SIGKILLs itself half-way through the n-th vector write (which
# is model a's or model b's, alternately) or after the n-th batch. Seed -1: no kill.
INDEXER = """
import os, random, signal, sys
from qres.backends.embedded import EmbeddedBackend
from qres.corpus.readers import read_corpus
from qres.encoders.runtime import Encoder
from qres.indexing.pipeline import index_questions

index_dir, corpus, models, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
encoders = [Encoder.load(m) for m in models.split(",")]
nth = random.Random(seed).randint(1, 2 * 1000 // 40)
calls = []
real = os.pwrite

def torn(fd, data, offset):
    calls.append(1)
    if len(calls) == nth:
        real(fd, bytes(data)[: len(data) // 2 + 3], offset)
        os.kill(os.getpid(), signal.SIGKILL)
    return real(fd, data, offset)

if seed >= 0:
    os.pwrite = torn
with EmbeddedBackend(index_dir, create=True) as backend:
    index_questions(backend, read_corpus(corpus), encoder=encoders, batch_size=40,
                    commit_every=200)
os._exit(0)
"""


@pytest.mark.slow
def test_kill_9_in_either_vector_file_keeps_a_committed_prefix_with_aligned_vectors(
    tmp_path, models, encoders
):
    questions = make_corpus(1000, seed=2)
    corpus = write_tsv(tmp_path / "corpus.tsv", questions)
    names = ",".join(map(str, models))
    killed = []
    for seed in range(6):
        proc = python(INDEXER, tmp_path / "ix", corpus, names, seed)
        assert proc.returncode in (0, -9), proc.stderr
        killed.append(proc.returncode == -9)
        with EmbeddedBackend(tmp_path / "ix") as ix:
            n = assert_committed_prefix(ix, questions)
            for encoder in encoders:
                assert mismatches(ix, encoder, questions[:n]) == 0, f"seed {seed}"
    assert sum(killed) >= 5, killed
    assert python(INDEXER, tmp_path / "ix", corpus, names, -1).returncode == 0
    with EmbeddedBackend(tmp_path / "ix") as ix:
        assert assert_committed_prefix(ix, questions) == 1000
        for encoder in encoders:
            assert mismatches(ix, encoder, questions) == 0
    meta = json.loads((tmp_path / "ix" / "meta.json").read_text())
    assert [m["vector_dim"] for m in meta["more_models"]] == [8]


# -- searching an index of several models ------------------------------------------------------


@pytest.fixture
def two_model_index(tmp_path, models, encoders):
    questions = make_corpus(200, seed=4)
    build(tmp_path / "ix", questions, encoders)
    return tmp_path / "ix", questions


def test_hybrid_over_two_models_equals_a_hand_computation(tmp_path, two_model_index, encoders):
    from qres.ranking.fusion import Fusion
    from qres.ranking.search import SearchPipeline

    a, b = encoders
    path, questions = two_model_index
    fusion_file = Fusion(
        bm25=0.2, cosine=0.0, params=[0.2, 0.5, 0.3], models=[b.fingerprint, a.fingerprint]
    ).save_file(tmp_path / "fusion.json")
    text = f"{questions[7].title} {questions[9].body}"
    with EmbeddedBackend(path) as ix:
        pipeline = SearchPipeline.for_index(ix, fusion=fusion_file, dense_candidates=0)
        assert [e.fingerprint for e in pipeline.encoders] == [b.fingerprint, a.fingerprint]
        got = pipeline.search(text, k=10)
        hits = ix.search(text, 100)
        ids = [h.id for h in hits]
        bm25 = np.array([h.score for h in hits], np.float32)
        cos = {}
        for e in encoders:
            vectors, has = ix.vectors(ids, model=e.fingerprint)
            assert has.all()
            cos[e.fingerprint] = vectors @ e.encode_query(text)
    fused = 0.2 * bm25 / bm25.max() + 0.5 * cos[b.fingerprint] + 0.3 * cos[a.fingerprint]
    order = np.argsort(-fused, kind="stable")[:10]
    assert [r.id for r in got] == [ids[i] for i in order]
    assert [r.score for r in got] == pytest.approx([float(fused[i]) for i in order], abs=1e-5)
    for r, i in zip(got, order, strict=True):
        assert r.cosines == pytest.approx(
            (float(cos[b.fingerprint][i]), float(cos[a.fingerprint][i])), abs=1e-5
        )
    # without a fusion file: half the weight on BM25, the rest shared by the cosines
    with (
        EmbeddedBackend(path) as ix,
        SearchPipeline.for_index(ix, dense_candidates=0) as pipeline,
    ):
        equal = pipeline.search(text, k=10)
    fused = 0.5 * bm25 / bm25.max() + 0.25 * cos[a.fingerprint] + 0.25 * cos[b.fingerprint]
    order = np.argsort(-fused, kind="stable")[:10]
    assert [r.id for r in equal] == [ids[i] for i in order]


def test_dense_over_two_models_weighs_the_cosines_as_the_fusion_does(
    tmp_path, two_model_index, encoders
):
    """Dense mode ranks by the cosines weighed as the fusion weighs them (scaled to sum to
    1), so a model the fusion gives no say has none there either; with equal weights, or a
    fusion that is no weighted sum, by their mean. The result's cosine is that mix."""
    from qres.ranking.fusion import Fusion
    from qres.ranking.search import SearchPipeline

    a, b = encoders
    path, questions = two_model_index
    text = f"{questions[3].title} {questions[11].body}"
    with EmbeddedBackend(path) as ix:
        ids = [h.id for h in ix.search(text, 100)]
        cos = {}
        for e in encoders:
            vectors, _ = ix.vectors(ids, model=e.fingerprint)
            cos[e] = vectors @ e.encode_query(text)
    weighed = {
        (0.2, 0.5, 0.3): 0.625 * cos[b] + 0.375 * cos[a],
        (0.1, 0.0, 0.9): cos[a],  # b without a say
        (0.5, 0.25, 0.25): (cos[a] + cos[b]) / 2,
    }
    for params, expected in weighed.items():
        fusion_file = Fusion(
            bm25=0.0, cosine=0.0, params=list(params), models=[b.fingerprint, a.fingerprint]
        ).save_file(tmp_path / "fusion.json")
        with (
            EmbeddedBackend(path) as ix,
            SearchPipeline.for_index(ix, fusion=fusion_file, dense_candidates=0) as pipeline,
        ):
            got = pipeline.search(text, k=10, mode="dense")
        order = np.argsort(-expected, kind="stable")[:10]
        assert [r.id for r in got] == [ids[i] for i in order], params
        assert [r.cosine for r in got] == pytest.approx(
            [float(expected[i]) for i in order], abs=1e-5
        )
    other = Fusion(bm25=0.0, cosine=0.0, method="rrf", models=[b.fingerprint, a.fingerprint])
    mean = (cos[a] + cos[b]) / 2
    assert other.cosine_of([cos[b], cos[a]]) == pytest.approx(mean, abs=1e-6)


def test_a_model_missing_at_query_time_is_named_in_one_line(tmp_path, models, encoders):
    import shutil

    from qres.ranking.search import SearchPipeline

    root = tmp_path / "m"
    shutil.copytree(models[1], root / "b")
    build(tmp_path / "ix", make_corpus(50), [encoders[0], Encoder.load(root / "b")])
    shutil.rmtree(root / "b")
    with EmbeddedBackend(tmp_path / "ix") as ix:
        with pytest.raises(BackendError) as err:
            SearchPipeline.for_index(ix)
        message = str(err.value)
        assert f"model {encoders[1].fingerprint[:12]} of this index cannot be loaded" in message
        assert str(root / "b") in message and "\n" not in message
        assert SearchPipeline.for_index(ix, mode="bm25").search("w1 w2", k=3)  # BM25 still works


def test_a_model_directory_now_holding_another_model_is_refused_in_one_line(
    tmp_path, models, encoders
):
    """Vectors of the old model are never scored against queries of the new one (a member
    re-imported with other settings gets another fingerprint at the same path)."""
    import shutil

    from qres.ranking.search import SearchPipeline

    root = tmp_path / "m"
    shutil.copytree(models[1], root / "b")
    build(tmp_path / "ix", make_corpus(50), [encoders[0], Encoder.load(root / "b")])
    shutil.rmtree(root / "b")
    other = write_model(root / "b", dim=8, seed=2)
    with EmbeddedBackend(tmp_path / "ix") as ix:
        with pytest.raises(BackendError) as err:
            SearchPipeline.for_index(ix)
        message = str(err.value)
        assert message.startswith(
            f"the index holds vectors of model {encoders[1].fingerprint[:12]} but {other} is "
            f"now model {Encoder.load(other).fingerprint[:12]}: re-index with"
        )
        assert "--rebuild" in message and "\n" not in message


def test_query_time_models_and_fusions_must_match_the_index(tmp_path, two_model_index, encoders):
    from qres.ranking.fusion import Fusion
    from qres.ranking.search import SearchPipeline
    from tests.fakes import TableEncoder

    a, b = encoders
    path, _ = two_model_index
    wrong = Fusion(bm25=0.5, cosine=0.5, params=[0.5, 0.5], models=[a.fingerprint])
    with EmbeddedBackend(path) as ix:
        with pytest.raises(BackendError, match=f"fuses models {a.fingerprint[:12]} but"):
            SearchPipeline.for_index(ix, fusion=wrong.save_file(tmp_path / "f.json"))
        with pytest.raises(BackendError, match="the index holds 8 dims for model"):
            SearchPipeline(ix, TableEncoder({}, dim=4, fingerprint=b.fingerprint))
        with pytest.raises(BackendError, match="is not one of this index's models"):
            SearchPipeline(ix, TableEncoder({}, dim=8, fingerprint="f" * 64))
        # one model of the index alone: its own cosine, not the first file's
        alone = SearchPipeline(ix, b).search("w3 w4 w5", k=5, mode="dense")
        ids = [r.id for r in alone]
        vectors, _ = ix.vectors(ids, model=b.fingerprint)
        want = vectors @ b.encode_query("w3 w4 w5")
        assert [r.cosine for r in alone] == pytest.approx(list(want), abs=1e-5)


def test_cli_indexes_two_models_and_explains_every_signal(run, tmp_path, models, encoders):
    a, b = encoders
    corpus = write_tsv(tmp_path / "q.tsv", make_corpus(60, seed=6))
    assert run("index", corpus, "--model", models[0]).exit_code == 0
    result = run("index", corpus, "--model", models[0], "--model", models[1])
    assert result.exit_code == 0, result.output
    result = run("search", "w10 w11 w12", "--explain", "-k", "3")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = lines[1].split("   ")  # the columns, apart by at least three spaces
    assert [c.strip() for c in header if c.strip().startswith("cos")] == ["cos a", "cos b"]
    result = run("--json", "search", "w10 w11 w12", "-k", "3")
    hits = json.loads(result.output)["results"]
    assert all(len(h["cosines"]) == 2 for h in hits)
    result = run("index", corpus, "--model", models[1])
    assert result.exit_code == 1
    assert result.output.startswith(
        f"error: this index holds vectors of model {a.fingerprint[:12]}"
    )
    result = run("index", corpus, "--model", models[1], "--model", models[0], "--rebuild")
    assert result.exit_code == 0, result.output
    with EmbeddedBackend(tmp_path / "home" / "index") as ix:
        assert ix.vector_models() == [b.fingerprint, a.fingerprint]
        assert ix.storage() == {"vector_rows": 60, "dead_vector_rows": 0}
    files = set(os.listdir(tmp_path / "home" / "index")) - {"writer.lock"}
    assert files == {"meta.json", "tantivy", "vectors.f16", f"vectors-{a.fingerprint[:16]}.f16"}


def test_the_service_searches_and_writes_an_index_of_two_models(
    tmp_path, two_model_index, encoders
):
    import asyncio

    import httpx

    from qres.service import app as service

    a, b = encoders
    path, questions = two_model_index
    app = service.create_app(service.ServiceConfig(index_dir=str(path), open_writes=True))
    q = questions[11]

    async def calls():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://qres") as http:
            put = await http.put("/questions/n1", json={"title": q.title, "body": "w499 w498"})
            found = await http.post(
                "/search", json={"title": q.title, "body": q.body, "explain": True}
            )
            return put, found

    put, found = asyncio.run(calls())
    app.state.service.close()
    assert put.status_code == 200, put.text
    assert found.status_code == 200, found.text
    assert found.json()["results"][0]["id"] == q.id
    with EmbeddedBackend(path) as ix:
        new = [*ix.fetch(["n1"]).values()]
        assert mismatches(ix, a, new) == mismatches(ix, b, new) == 0


def test_a_vector_file_that_cannot_be_opened_leaves_the_others_whole(tmp_path, encoders):
    a, b = encoders
    questions = make_corpus(50)
    build(tmp_path / "ix", questions, encoders)
    size = (tmp_path / "ix" / "vectors.f16").stat().st_size
    second = vector_file(tmp_path / "ix", b)
    second.unlink()
    second.mkdir()  # os.open fails on it
    with pytest.raises(BackendError, match=f"{second.name}: cannot write vectors"):
        build(tmp_path / "ix", make_corpus(5, seed=9, prefix="x"), encoders)
    assert (tmp_path / "ix" / "vectors.f16").stat().st_size == size
    with EmbeddedBackend(tmp_path / "ix") as ix:
        assert mismatches(ix, a, questions) == 0


def test_tune_fusion_out_saves_a_fusion_of_every_model_that_search_reads(
    tmp_path, monkeypatch, encoders
):
    """`qres tune-fusion --cv K --model A --model B --out FILE`: the refit fusion names both
    models, in --model order, and scores [bm25/top, cos A, cos B] as the CV fitted it."""
    from qres.cli import tune_fusion as cli
    from qres.cli.group import Context
    from qres.evaluation import fusion_fit as fcv
    from qres.ranking.fusion import Fusion
    from tests.test_fusion_cv import synthetic

    lists = synthetic(n_queries=30, informative=2)  # the second model's cosine is the signal
    monkeypatch.setattr(fcv, "semeval_candidate_lists", lambda *args: lists)
    obj = Context(tmp_path, None, True, None)
    out = tmp_path / "both.json"
    semeval = ([None, None], 3, "train", "weighted-sum", None)
    cli._tune_fusion_cv(obj, ["a", "b"], list(encoders), *semeval, None, 100, out, None)
    fusion = Fusion.read(out)
    assert fusion.models == [e.fingerprint for e in encoders]
    assert fusion.method == "weighted-sum" and fusion.params == fcv.fit("weighted-sum", lists)
    assert fusion.params[2] > fusion.params[0] + fusion.params[1]
    c = lists[0]
    cosines = [c.x[:, 1], c.x[:, 2]]
    x = np.stack([c.x[:, 0] / c.x[:, 0].max(), *cosines], axis=1)  # bm25 over the query's top
    assert np.allclose(fusion.score(c.x[:, 0], cosines), x @ np.asarray(fusion.params))


def test_a_long_lived_reader_follows_a_model_being_added(tmp_path, encoders):
    from qres.ranking.search import SearchPipeline

    a, b = encoders
    questions = make_corpus(100, seed=8)
    build(tmp_path / "ix", questions, [a])
    with EmbeddedBackend(tmp_path / "ix") as reader:
        pipeline = SearchPipeline(reader, a)
        text = questions[3].title
        before = pipeline.search(text, k=5, mode="dense")
        build(tmp_path / "ix", [], [a, b])  # another writer adds b: a new directory swapped in
        after = pipeline.search(text, k=5, mode="dense")
        assert [(r.id, r.cosine) for r in after] == [(r.id, r.cosine) for r in before]
        assert reader.vector_models() == [a.fingerprint, b.fingerprint]
        assert mismatches(reader, b, questions) == 0


def test_serve_fusion_passes_the_fusion_file_to_the_pipeline(
    run, tmp_path, monkeypatch, two_model_index, encoders
):
    """`qres serve --fusion FILE` searches with that file's fusion, in its model order; a
    fusion of other models is refused in one line before the server starts."""
    import uvicorn

    from qres.ranking.fusion import Fusion

    a, b = encoders
    path, _ = two_model_index
    fusion = Fusion(
        bm25=0.1, cosine=0.0, params=[0.1, 0.2, 0.7], models=[b.fingerprint, a.fingerprint]
    ).save_file(tmp_path / "ba.json")
    served = []

    def fake_run(app, **_address):
        served.append(app.state.service)
        app.state.service.close()

    monkeypatch.setattr(uvicorn, "run", fake_run)
    result = run("--index-dir", path, "serve", "--fusion", fusion)
    assert result.exit_code == 0, result.output
    (service,) = served
    assert service.pipeline.fusion == Fusion.read(fusion)
    assert [e.fingerprint for e in service.pipeline.encoders] == [b.fingerprint, a.fingerprint]
    wrong = Fusion(0.5, 0.5, params=[0.5, 0.5], models=[a.fingerprint])
    result = run("--index-dir", path, "serve", "--fusion", wrong.save_file(tmp_path / "a.json"))
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert result.output.startswith(f"error: {tmp_path / 'a.json'} fuses models")
    assert len(served) == 1


def test_explain_columns_name_each_model_and_tell_same_names_apart():
    from types import SimpleNamespace

    from qres.ranking.search import model_labels

    def model(path, fingerprint, architecture="transformer"):
        card = {"architecture": architecture}
        return SimpleNamespace(model_dir=path, fingerprint=fingerprint, card=card)

    labels = model_labels(
        [
            model("x/default", "1" * 64, "gru"),
            model("y/minilm", "2" * 64),
            model("z/minilm", "3" * 64),
        ]
    )
    assert labels == ["gru", "minilm 22222222", "minilm 33333333"]  # "default" says nothing
