"""The backend contract: behaviour every backend must show, written against the interface.

Each backend's test module subclasses :class:`BackendContract` and provides a ``make_backend``
fixture: a callable returning a fresh, empty backend (called again with the same name, it
must reopen the same index, as a second process would).
"""

from __future__ import annotations

import numpy as np
import pytest

from qres.backends.base import BackendError
from qres.corpus.readers import Question

QUESTIONS = [
    Question(
        "u1",
        "How do I boot Ubuntu from a USB stick?",
        "My laptop ignores the pendrive.",
        ("boot", "usb"),
    ),
    Question(
        "u2",
        "Wifi drops every few minutes",
        "Intel card on 22.04, reconnects by itself.",
        ("wifi",),
    ),
    Question("u3", "Install Ubuntu alongside Windows", "How do I dual boot without losing data?"),
    Question("u4", "Sound stops after suspend", "No audio until I reboot."),
    Question(
        "u5", "Create a bootable USB on Windows", "Which tool writes the ISO to a flash drive?"
    ),
]


def vectors_for(n: int, dim: int = 4, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class BackendContract:
    @pytest.fixture
    def backend(self, make_backend):
        b = make_backend("contract")
        yield b
        b.close()

    def fill(self, backend, questions=QUESTIONS, vectors=None):
        backend.upsert(questions, vectors)
        backend.commit()

    def test_empty_index_counts_zero_and_finds_nothing(self, backend):
        assert backend.count() == 0
        assert backend.search("ubuntu", 10) == []

    def test_upsert_then_search_ranks_matching_questions(self, backend):
        self.fill(backend)
        assert backend.count() == 5
        hits = backend.search("boot ubuntu usb", 10)
        assert hits[0].id == "u1"
        assert {h.id for h in hits} >= {"u1", "u3", "u5"}
        assert "u4" not in {h.id for h in hits}
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True) and scores[-1] > 0

    def test_stemming_matches_inflections(self, backend):
        self.fill(backend)
        assert "u1" in {h.id for h in backend.search("booting", 5)}

    def test_title_is_boosted_over_body(self, backend):
        self.fill(
            backend,
            [Question("t", "pendrive", "other words"), Question("b", "other words", "pendrive")],
        )
        assert [h.id for h in backend.search("pendrive", 2)] == ["t", "b"]

    def test_a_title_being_typed_is_completed_from_its_best_matches_titles(self, backend):
        from qres.ranking.search import SearchPipeline

        self.fill(backend)
        pipeline = SearchPipeline(backend)
        assert pipeline.complete_typed("bootable us") == "bootable usb"
        assert pipeline.complete_typed("wifi dr") == "wifi drops"
        assert pipeline.complete_typed("wifi dr ") == "wifi dr "  # a finished word
        assert pipeline.complete_typed("zzqx") == "zzqx"  # nothing matches: as typed

    def test_a_word_no_best_match_extends_is_completed_from_every_title(self, backend):
        from qres.ranking.search import SearchPipeline

        self.fill(backend)
        assert backend.title_words("win", 5) == [("windows", 2)]
        assert backend.title_words("boo", 5) == [("boot", 1), ("bootable", 1)]  # ties: a-z
        assert backend.title_words("wi", 1) == [("windows", 2)]  # most first
        assert backend.title_words("zzq", 5) == []
        pipeline = SearchPipeline(backend)
        assert pipeline.complete_typed("wind") == "windows"  # a first word: nothing matches it
        assert pipeline.complete_typed("sound win") == "sound windows"  # its matches: no win…
        assert pipeline.complete_typed("sound wi") == "sound wi"  # too short to guess from all
        backend.delete(["u3"])
        backend.upsert([Question("u6", "Wifi card not found", "after an update")])
        backend.commit()
        assert backend.title_words("wi", 5) == [("wifi", 2), ("windows", 1)]  # live titles

    def test_k_limits_results(self, backend):
        self.fill(backend)
        assert len(backend.search("ubuntu usb boot windows", 2)) == 2

    def test_upsert_same_id_replaces(self, backend):
        self.fill(backend)
        self.fill(backend, [Question("u4", "Printer not found", "CUPS cannot see it.")])
        assert backend.count() == 5
        assert backend.search("sound suspend", 5) == []
        assert backend.fetch(["u4"])["u4"].title == "Printer not found"

    def test_duplicate_ids_in_one_batch_keep_the_last(self, backend):
        self.fill(backend, [Question("d", "first", "x"), Question("d", "second", "y")])
        assert backend.count() == 1
        assert backend.fetch(["d"])["d"].title == "second"

    def test_delete(self, backend):
        self.fill(backend)
        backend.delete(["u1", "missing"])
        backend.commit()
        assert backend.count() == 4
        assert "u1" not in {h.id for h in backend.search("usb", 10)}
        assert backend.fetch(["u1"]) == {}

    def test_ids_not_in_names_the_committed_questions_not_given(self, backend):
        self.fill(backend)
        assert sorted(backend.ids_not_in({"u1", "u3", "missing"})) == ["u2", "u4", "u5"]
        assert sorted(backend.ids_not_in(set())) == ["u1", "u2", "u3", "u4", "u5"]
        backend.delete(["u2"])
        backend.upsert([QUESTIONS[0]])  # replaced, held once
        backend.commit()
        assert sorted(backend.ids_not_in({"u1"})) == ["u3", "u4", "u5"]

    def test_an_id_longer_than_every_backend_can_address_is_refused(self, backend):
        """Issue 34: ids over 65,530 bytes were stored by the embedded backend, yet could not
        be fetched, replaced or deleted. One limit everywhere: 512 bytes (UTF-8)."""
        longest, too_long = "é" * 256, "é" * 256 + "x"  # 512 bytes, 513 bytes
        with pytest.raises(BackendError, match="longer than 512 bytes"):
            backend.upsert([Question("ok", "t", "b"), Question(too_long, "t", "b")])
        backend.commit()
        assert backend.count() == 0  # the batch is refused before anything is written
        self.fill(backend, [Question(longest, "first", "x")])
        self.fill(backend, [Question(longest, "second", "y")])
        assert backend.count() == 1 and backend.fetch([longest])[longest].title == "second"
        backend.delete([longest])
        backend.commit()
        assert backend.count() == 0

    def test_fetch_returns_stored_fields(self, backend):
        self.fill(backend)
        got = backend.fetch(["u1", "u2", "nope"])
        assert set(got) == {"u1", "u2"}
        assert got["u1"] == QUESTIONS[0]
        assert got["u2"].tags == ("wifi",)

    def test_extras_are_stored_and_fetched_never_searched(self, backend):
        extras = {
            "score": 12,
            "answer_count": 3,
            "accepted_answer_id": "7",
            "closed_date": "2013-05-01T10:00:00.000",
        }
        visa = Question(
            "x1", "Visa on arrival in Qatar", "Can I get one at the airport?", (), extras
        )
        self.fill(backend, [visa, *QUESTIONS])
        got = backend.fetch(["x1", "u1"])
        assert got["x1"].extras == extras
        assert isinstance(got["x1"].extras["answer_count"], int)
        assert got["u1"].extras == {}  # written without any
        for text in ("answer_count", "accepted", "2013", "12"):
            assert backend.search(text, 5) == [], text  # stored, not indexed
        assert [h.id for h in backend.search("visa qatar", 5)] == ["x1"]
        self.fill(backend, [Question("x1", visa.title, visa.body, (), {"answer_count": 4})])
        assert backend.fetch(["x1"])["x1"].extras == {"answer_count": 4}  # replaced whole

    @pytest.mark.parametrize(
        "text",
        [
            "title:usb",
            '"usb',
            "usb AND NOT boot",
            "usb*",
            "((usb",
            "usb)",
            "title:(usb OR x)",
            "usb^10",
            "u?b",
            "[usb TO z]",
            "-usb +boot",
            "usb~2",
            "\\",
            "{}",
            "usb " * 2500,
        ],
    )
    def test_query_syntax_is_plain_text(self, backend, text):
        self.fill(backend)
        hits = backend.search(text, 10)  # never raises
        assert all(h.id in {q.id for q in QUESTIONS} for h in hits)
        if "usb" in text:
            assert hits and hits[0].id in {"u1", "u5"}

    def test_field_syntax_does_not_restrict_to_a_field(self, backend):
        self.fill(backend, [Question("a", "cats", "pendrive"), Question("b", "dogs", "nothing")])
        # As plain words "title:pendrive" is the terms title + pendrive: it finds the body match.
        assert [h.id for h in backend.search("title:pendrive", 5)] == ["a"]

    def test_stop_words_only_query_finds_nothing(self, backend):
        self.fill(backend)
        assert backend.search("the of and", 5) == []
        assert backend.search("", 5) == []

    def test_only_ids_restricts_and_scores_non_matching_zero(self, backend):
        self.fill(backend)
        hits = backend.search("usb boot", 10, only_ids=["u1", "u4", "zz"])
        assert [h.id for h in hits] == ["u1", "u4"]
        assert hits[1].score == 0

    def test_uncommitted_writes_are_invisible_to_another_reader(self, backend, make_backend):
        self.fill(backend)
        backend.upsert([Question("new", "brand new usb question", "")])
        reader = make_backend("contract", reopen=True)
        try:
            assert reader.count() == 5
            assert "new" not in {h.id for h in reader.search("usb", 10)}
        finally:
            reader.close()

    def test_vectors_round_trip_and_follow_replacement(self, backend):
        vectors = vectors_for(5)
        self.fill(backend, vectors=vectors)
        got, has = backend.vectors(["u3", "u1", "nope"])
        assert has.tolist() == [True, True, False]
        np.testing.assert_allclose(got[:2], vectors[[2, 0]], atol=1e-3)  # float16 storage
        assert not got[2].any()
        new = vectors_for(1, seed=9)
        self.fill(backend, [QUESTIONS[2]], new)
        got, _ = backend.vectors(["u3"])
        np.testing.assert_allclose(got[0], new[0], atol=1e-3)

    def test_nearest_ranks_live_questions_by_cosine_or_is_refused(self, backend):
        """Either the exact top k by cosine over the live questions with a vector, best first,
        or (a backend that keeps no searchable vectors) a clear BackendError."""
        vectors = vectors_for(5, dim=8, seed=3)
        self.fill(backend, vectors=vectors)
        query = vectors_for(1, dim=8, seed=4)[0]
        if not backend.supports_nearest:
            with pytest.raises(BackendError, match="nearest"):
                backend.nearest(query, 3)
            return
        order = np.argsort(-(vectors @ query))
        hits = backend.nearest(query, 3)
        assert [h.id for h in hits] == [QUESTIONS[i].id for i in order[:3]]
        np.testing.assert_allclose([h.score for h in hits], (vectors @ query)[order[:3]], atol=2e-3)
        # deleted, replaced and vector-less questions are not found; k beyond them is fine
        best, second = QUESTIONS[order[0]], QUESTIONS[order[1]]
        backend.delete([best.id])
        backend.upsert([second], -query[None, :])  # now the farthest of all
        backend.upsert([Question("novec", "no vector", "here")])
        backend.commit()
        ids = [h.id for h in backend.nearest(query, 10)]
        assert ids == [QUESTIONS[i].id for i in order[2:]] + [second.id]
        assert backend.nearest(query, 0) == []

    def test_questions_without_vectors_are_flagged(self, backend):
        self.fill(backend)
        _, has = backend.vectors(["u1"])
        assert has.tolist() == [False]

    def test_metadata_is_durable(self, backend, make_backend):
        backend.set_metadata({"model_fingerprint": "abc", "vector_dim": 4})
        reader = make_backend("contract", reopen=True)
        try:
            assert reader.metadata()["model_fingerprint"] == "abc"
        finally:
            reader.close()

    def test_rebuild_is_invisible_to_readers_until_finished(self, backend, make_backend):
        self.fill(backend, vectors=vectors_for(5))
        backend.begin_rebuild()
        new = [Question("n1", "Printer not found", "CUPS cannot see it.")]
        backend.upsert(new, vectors_for(1, seed=3))
        backend.commit()
        assert backend.count() == 1  # this object reads the index being built
        reader = make_backend("contract", reopen=True)
        try:
            assert reader.count() == 5 and reader.fetch(["n1"]) == {}
            backend.finish_rebuild()
            assert backend.count() == 1
            assert reader.count() == 1  # the same long-lived reader sees the new index
            assert reader.fetch(["u1"]) == {} and reader.fetch(["n1"])["n1"] == new[0]
            got, has = reader.vectors(["n1"])
            assert has.all()
            np.testing.assert_allclose(got[0], vectors_for(1, seed=3)[0], atol=1e-3)
        finally:
            reader.close()

    def test_aborted_rebuild_leaves_the_index_as_it_was(self, backend, make_backend):
        self.fill(backend)
        backend.begin_rebuild()
        backend.upsert([Question("n1", "Printer not found", "")])
        backend.commit()
        backend.abort_rebuild()
        reader = make_backend("contract", reopen=True)
        try:
            assert reader.count() == 5 and reader.fetch(["n1"]) == {}
        finally:
            reader.close()

    def test_an_exception_in_a_with_block_discards_the_rebuild(self, backend, make_backend):
        self.fill(backend)
        backend.close()
        with (
            pytest.raises(RuntimeError, match="boom"),
            make_backend("contract", reopen=True) as rebuilding,
        ):
            rebuilding.begin_rebuild()
            rebuilding.upsert([Question("n1", "Printer not found", "")])
            raise RuntimeError("boom")
        with make_backend("contract", reopen=True) as reader:
            assert reader.count() == 5
        with make_backend("contract", reopen=True) as rebuilding:
            rebuilding.begin_rebuild()
            rebuilding.upsert([Question("n1", "Printer not found", "")])
        with make_backend("contract", reopen=True) as reader:
            assert reader.count() == 1 and reader.fetch(["n1"])

    # -- several models: a vector per model for each question (issue 15, item 4) --------------

    MODEL_A, MODEL_B = "a" * 64, "b" * 64

    def two_models(self, backend, questions=QUESTIONS):
        """Record models A (4 dims) and B (3 dims) as indexing does, then write questions with
        a vector of each; returns their vectors {fingerprint: rows}."""
        backend.set_metadata(
            {
                "model_fingerprint": self.MODEL_A,
                "vector_dim": 4,
                "model_dir": None,
                "more_models": [
                    {"model_fingerprint": self.MODEL_B, "vector_dim": 3, "model_dir": None}
                ],
                "format": 3,
            }
        )
        vectors = {
            self.MODEL_A: vectors_for(len(questions), dim=4, seed=1),
            self.MODEL_B: vectors_for(len(questions), dim=3, seed=2),
        }
        self.fill(backend, questions, vectors)
        return vectors

    def test_several_models_keep_a_vector_each_and_score_every_cosine(self, backend):
        vectors = self.two_models(backend)
        for fp in (self.MODEL_A, self.MODEL_B):
            got, has = backend.vectors(["u3", "u1"], model=fp)
            assert has.all()
            np.testing.assert_allclose(got, vectors[fp][[2, 0]], atol=1e-3)
        queries = {self.MODEL_A: vectors_for(1, 4, seed=5)[0], self.MODEL_B: vectors_for(1, 3)[0]}
        found = backend.candidates("boot ubuntu usb windows", 10, query_vector=queries)
        ids = found.ids(range(len(found)))
        assert set(ids) == {"u1", "u3", "u5"} and found.has_vector.all()
        rows = [int(qid[1:]) - 1 for qid in ids]
        for fp, query in queries.items():
            np.testing.assert_allclose(found.cosines[fp], vectors[fp][rows] @ query, atol=2e-3)
        # a single query vector is the first model's
        _, cosine, _ = backend.search_with_cosine(
            "boot ubuntu usb windows", 10, queries[self.MODEL_A]
        )
        np.testing.assert_allclose(cosine, found.cosines[self.MODEL_A], atol=1e-6)

    def test_nearest_searches_the_named_model(self, backend):
        vectors = self.two_models(backend)
        if not backend.supports_nearest:
            with pytest.raises(BackendError, match="nearest"):
                backend.nearest(vectors_for(1, 3)[0], 5, model=self.MODEL_B)
            return
        for fp, dim in ((self.MODEL_A, 4), (self.MODEL_B, 3)):
            query = vectors_for(1, dim, seed=6)[0]
            want = [QUESTIONS[i].id for i in np.argsort(-(vectors[fp] @ query))]
            assert [h.id for h in backend.nearest(query, 5, model=fp)] == want
        first = vectors_for(1, 4, seed=6)[0]
        assert backend.nearest(first, 5) == backend.nearest(first, 5, model=self.MODEL_A)

    def test_several_models_need_a_vector_of_each(self, backend):
        self.two_models(backend)
        with pytest.raises(BackendError, match="vectors of 2 models"):
            backend.upsert(QUESTIONS[:1], vectors_for(1))
        with pytest.raises(BackendError, match=f"model {self.MODEL_B[:12]}"):
            backend.upsert(QUESTIONS[:1], {self.MODEL_A: vectors_for(1)})
        with pytest.raises(BackendError, match=f"model {'c' * 12}"):
            backend.vectors(["u1"], model="c" * 64)

    def test_adding_a_model_gives_the_questions_held_its_vectors(self, backend, make_backend):
        backend.set_metadata({"model_fingerprint": self.MODEL_A, "vector_dim": 4})
        held = vectors_for(5, dim=4, seed=1)
        self.fill(backend, vectors=held)
        self.fill(backend, [Question("plain", "no vector here", "")])
        new = {q.id: row for q, row in zip(QUESTIONS, vectors_for(5, dim=3, seed=2), strict=True)}
        asked: list[str] = []

        def encode(questions):
            asked.extend(q.id for q in questions)
            return {self.MODEL_B: np.stack([new[q.id] for q in questions])}

        model = {"model_fingerprint": self.MODEL_B, "vector_dim": 3, "model_dir": None}
        assert backend.add_models([model], encode) == 5
        assert sorted(asked) == sorted(new)  # the question without vectors is not encoded
        reader = make_backend("contract", reopen=True)
        try:
            meta = reader.metadata()
            assert [m["model_fingerprint"] for m in meta["more_models"]] == [self.MODEL_B]
            ids = [q.id for q in QUESTIONS]
            got, has = reader.vectors(ids, model=self.MODEL_B)
            assert has.all()
            np.testing.assert_allclose(got, np.stack([new[i] for i in ids]), atol=1e-3)
            got, _ = reader.vectors(ids, model=self.MODEL_A)
            np.testing.assert_allclose(got, held, atol=1e-3)
            assert reader.fetch(["u1"])["u1"] == QUESTIONS[0]
            assert reader.search("boot ubuntu usb", 1)[0].id == "u1"  # BM25 terms kept
        finally:
            reader.close()
