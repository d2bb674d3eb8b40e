"""Following duplicate links by vector slot: the same results as reading each hit, and where
a hit leads learnt again after every commit, in this process or another."""

from __future__ import annotations

import random
import sys
import threading

import numpy as np
import pytest

from qres.backends.embedded import EmbeddedBackend, snapshot
from qres.backends.embedded.landings import Landings
from qres.corpus import duplicate_links
from qres.corpus.readers import Question
from qres.indexing.pipeline import index_questions
from qres.ranking import duplicates
from qres.ranking.search import SearchPipeline

from .fakes import TableEncoder

WORDS = "visa border schengen overstay fine penalty train ticket airport bag lost rail".split()
ENCODER = TableEncoder({w: i % 6 for i, w in enumerate(WORDS)}, dim=6)


def random_forum(seed: int, size: int = 240) -> list[Question]:
    """Questions of a few shared words, with duplicate links of every shape: one original,
    several, chains, cycles, and originals the forum does not hold."""
    rng = random.Random(seed)
    questions = [
        Question(str(n), " ".join(rng.choices(WORDS, k=4)), " ".join(rng.choices(WORDS, k=12)))
        for n in range(size)
    ]
    links = {}
    for n in rng.sample(range(size), size // 3):
        originals = rng.sample(range(size), rng.choice([1, 1, 1, 2, 3]))
        named = [str(o) for o in originals if o != n] + (["gone"] if rng.random() < 0.1 else [])
        links[str(n)] = [(o, f"2012-0{rng.randint(1, 9)}-01") for o in named]
    return duplicate_links.attach(questions, {d: o for d, o in links.items() if o})


@pytest.fixture(scope="module", params=["vectors", "no vectors"])
def forum_index(tmp_path_factory, request):
    """The forum indexed with vectors (searched in bm25 and hybrid mode, the walk keyed by
    vector slot) or without (bm25 mode, keyed by the numbers Landings gives documents)."""
    path = tmp_path_factory.mktemp("walk") / "index"
    encoder = ENCODER if request.param == "vectors" else None
    with EmbeddedBackend(path, create=True) as backend:
        index_questions(backend, random_forum(7), encoder=encoder, workers=0)
    return path, encoder, ("bm25", "hybrid") if encoder else ("bm25",)


def searches(pipeline, queries, modes=("bm25", "hybrid"), ks=(1, 3, 10)):
    return [
        [(r.id, r.via, r.score, r.bm25, r.cosine, r.title) for r in pipeline.search(q, k, mode)]
        for mode in modes
        for k in ks
        for q in queries
    ]


def test_voting_by_slot_ranks_exactly_as_reading_every_hit(forum_index, monkeypatch):
    rng = random.Random(3)
    queries = [" ".join(rng.choices(WORDS, k=rng.choice([1, 2, 4]))) for _ in range(40)]
    path, encoder, modes = forum_index
    with EmbeddedBackend(path) as backend:
        pipeline = SearchPipeline(backend, encoder)
        assert pipeline.follow_duplicates
        took = []
        by_slot = duplicates.follow_by_slot
        monkeypatch.setattr(
            duplicates, "follow_by_slot", lambda *a: took.append(by_slot(*a)) or took[-1]
        )
        fast = searches(pipeline, queries, modes)
        assert sum(r is not None for r in took) > 0.9 * len(took)  # the slot walk ran
        assert any(any(v for _, v, *_ in results) for results in fast)  # originals shown
        monkeypatch.setattr(duplicates, "follow_by_slot", lambda *a: None)
        assert searches(pipeline, queries, modes) == fast


def test_a_voter_family_short_of_k_ranks_deeper_as_before(forum_index, monkeypatch):
    monkeypatch.setattr(duplicates, "VOTERS", 3)  # fewer families than k among the voters
    path, encoder, modes = forum_index
    with EmbeddedBackend(path) as backend:
        pipeline = SearchPipeline(backend, encoder)
        fast = searches(pipeline, ["visa fine", "train"], modes, ks=(5, 20))
        monkeypatch.setattr(duplicates, "follow_by_slot", lambda *a: None)
        assert searches(pipeline, ["visa fine", "train"], modes, ks=(5, 20)) == fast


FORUM = [
    Question("1", "schengen visa border", "Do I need a Schengen visa at the border crossing?"),
    Question("21", "overstay penalty fine", "overstay fine penalty days airport officer"),
    Question("5", "tipping usa restaurants", "How much to tip in restaurants"),
]
ORIGINAL = Question("1", "schengen visa border", "visa border crossing")


def shown(backend):
    return [(r.id, r.via) for r in SearchPipeline(backend, ENCODER).search("overstay", 3, "bm25")]


@pytest.mark.parametrize("writer_apart", [False, True], ids=["same backend", "another one"])
def test_where_a_hit_leads_follows_each_commit(tmp_path, writer_apart):
    path = tmp_path / "index"
    with EmbeddedBackend(path, create=True) as backend:
        index_questions(
            backend,
            duplicate_links.attach(FORUM, {"21": [("1", "2012-01-01")]}),
            encoder=ENCODER,
            workers=0,
        )
    reader = EmbeddedBackend(path)
    writer = EmbeddedBackend(path) if writer_apart else reader
    try:
        assert shown(reader) == [("1", "21")]
        writer.delete(["1"])  # the original gone: its duplicate stands for itself
        writer.commit()
        assert shown(reader) == [("21", None)]
        writer.upsert([ORIGINAL], ENCODER.encode_questions([ORIGINAL]))  # back, at a new slot
        writer.commit()
        assert shown(reader) == [("1", "21")]
        with EmbeddedBackend(path) as fresh:  # as a reader opened now sees it
            assert shown(fresh) == shown(reader)
    finally:
        if writer is not reader:
            writer.close()
        reader.close()


def test_a_commit_that_keeps_meta_json_s_stat_is_seen_at_the_next_content_check(
    tmp_path, monkeypatch
):
    path = tmp_path / "index"
    with EmbeddedBackend(path, create=True) as backend:
        index_questions(backend, FORUM, encoder=ENCODER, workers=0)
    monkeypatch.setattr(snapshot, "file_stamp", lambda path: "the same")  # a file replaced
    with EmbeddedBackend(path) as reader, EmbeddedBackend(path) as writer:  # in one tick
        assert reader.count() == 3
        monkeypatch.setattr(snapshot, "_RECHECK_S", 3600.0)
        writer.delete(["5"])
        writer.commit()
        assert reader.count() == 3  # the stat says nothing changed, and it is not time yet
        monkeypatch.setattr(snapshot, "_RECHECK_S", 0.0)
        assert reader.count() == 2


def test_where_hits_lead_is_learnt_once_and_right_while_another_search_grows_the_array():
    landings = Landings()

    def resolve(positions):
        assert positions == [0, 1]
        landings.of(np.array([5000]), lambda positions: [()])  # another search, meanwhile
        return [((7, "seven"),), ()]

    assert landings.of(np.array([3, 4]), resolve).to.tolist() == [7, 4]
    again = landings.of(np.array([4, 3, 5000]), lambda positions: pytest.fail("read again"))
    assert again.to.tolist() == [4, 7, 5000]
    assert again.names[7] == "seven" and landings.slot_of["seven"] == 7


def test_searches_at_once_on_a_new_searcher_all_read_where_hits_lead():
    # Each commit seen starts a new Landings, which the first searches grow at once.
    rounds, threads_at_once = 300, 6
    fresh = [Landings() for _ in range(rounds)]
    start, failures = threading.Barrier(threads_at_once), []

    def search(seed):
        rng = random.Random(seed)
        for landings in fresh:
            start.wait()
            slots = np.array(rng.sample(range(1024 * rng.randint(1, 64)), 20))
            try:
                landed = landings.of(slots, lambda positions: [()] * len(positions))
                assert landed.to.tolist() == slots.tolist()  # each stands for itself
            except Exception as error:  # noqa: BLE001 - any failure is the finding
                failures.append(repr(error))

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can
    try:
        threads = [threading.Thread(target=search, args=(n,)) for n in range(threads_at_once)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switching)
    assert failures == []


def test_documents_without_a_slot_are_numbered_once_each_up_to_a_bound(monkeypatch):
    from types import SimpleNamespace

    from qres.backends.embedded import landings as landings_module

    monkeypatch.setattr(landings_module, "_NUMBERED", 3)
    at = lambda segment, doc: SimpleNamespace(segment_ord=segment, doc=doc)  # noqa: E731
    landings = Landings()
    first = landings.numbers([at(0, 5), at(1, 5), at(0, 5)]).tolist()
    assert first[0] == first[2] and len(set(first)) == 2
    assert landings.numbers([at(1, 5), at(2, 0)]).tolist() == [first[1], max(first) + 1]
    assert landings.numbers([at(3, 3)]) is None  # past the bound: the walk reads each hit
    assert landings.numbers([at(0, 5)]).tolist() == [first[0]]
