"""The query path: candidates (BM25 top-K ∪ dense top-K) → cosine rescoring → fusion.

Modes:

* ``bm25`` — BM25 alone;
* ``dense`` — the candidates re-ordered by cosine similarity to the query vector;
* ``hybrid`` — the candidates re-ordered by the fused score (:mod:`qres.ranking.fusion`).

Candidates, in dense and hybrid modes: BM25's top ``candidates`` (K) together with the
``dense_candidates`` questions nearest to the query vector (:meth:`Backend.nearest`, cosine
search over the stored vectors; in an index of several models, each model's nearest,
or for a model set only its transformers' (:data:`qres.encoders.model_set.FIRST_STAGE`); never
the shipped GRU's, :func:`qres.encoders.model_set.first_stage_of` says why),
so a duplicate worded unlike its original can still be found. Each dense candidate BM25 did
not return gets its own BM25 score for the query (0 when it shares no term), and all are
rescored and fused alike. ``dense_candidates=0``, a backend without nearest-neighbour search,
and re-ranking a given list (``only_ids``) use BM25's candidates alone; a query that matches
no indexed word finds nothing, as in bm25 mode.

A candidate without a stored vector cannot be rescored: in dense and hybrid modes such
candidates follow the rescored ones, in their BM25 order, and are flagged in the result.
``qres search``, ``qres evaluate`` and the benchmarks all go through :class:`SearchPipeline`;
:meth:`SearchPipeline.open` is what ``qres search`` does: the index's own model (the one it
was indexed with) and that model's fusion weights.

An index of several models (``qres index --model A --model B``) is searched with all of
them: the query is encoded by each, every candidate gets one cosine per model, and the
fusion (``--fusion FILE``, see :mod:`qres.ranking.fusion`; without one, the shipped fusion of
:mod:`qres.encoders.model_set` when the index holds exactly that set, else equal weights) combines
BM25 with every cosine. Dense mode ranks by the cosines as the fusion weighs them (a
weighted sum's cosine weights, scaled to sum to 1; otherwise their mean): the default set's
shipped GRU, which its fusion gives no say, has none there either.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np

from qres.backends.base import Backend, BackendError, Candidates, index_models
from qres.corpus import duplicate_links
from qres.ranking import completion, duplicates
from qres.ranking.fusion import DEFAULT, Fusion, normalize_bm25, shipped_fusion_for
from qres.ranking.model_check import check_model_matches, short

MODES = ("bm25", "dense", "hybrid")
DEFAULT_CANDIDATES = 100
DEFAULT_DENSE_CANDIDATES = 100


SNIPPET_CHARS = 200


@dataclass(frozen=True, init=False)
class Result:
    # The defaults are __init__'s (below), the only place they are written.
    id: str
    score: float
    bm25: float
    cosine: float | None  # None: no vector for this candidate (or bm25 mode)
    cosines: tuple[float, ...] | None  # with several models: each one's cosine
    # What a forum shows beside a suggestion (empty when searched with ``with_text=False``);
    # not part of a result's identity, which is its ranking.
    title: str = field(compare=False)
    tags: tuple[str, ...] = field(compare=False)
    snippet: str = field(compare=False)  # the body's first words, whole words
    answer_count: int | None = field(compare=False)  # None: not known
    # Every stored display field (a dump's score, answer count, accepted answer, closed date).
    extras: Mapping[str, int | str] = field(compare=False)
    # The closed duplicate whose match put this original here, with its rank and scores
    # (qres.ranking.duplicates); None: the question matched itself.
    via: str | None = field(compare=False)

    def __init__(
        self,
        id: str,
        score: float,
        bm25: float,
        cosine: float | None,
        cosines: tuple[float, ...] | None = None,
        title: str = "",
        tags: tuple[str, ...] = (),
        snippet: str = "",
        answer_count: int | None = None,
        extras: Mapping[str, int | str] | None = None,
        via: str | None = None,
    ):
        # The fields set at once: a frozen dataclass's own __init__ sets each one through
        # object.__setattr__, 1.7 µs a result, a tenth of a BM25 search's time in Python.
        self.__dict__.update(
            id=id,
            score=score,
            bm25=bm25,
            cosine=cosine,
            cosines=cosines,
            title=title,
            tags=tags,
            snippet=snippet,
            answer_count=answer_count,
            extras={} if extras is None else extras,
            via=via,
        )


_NO_SCORES = np.empty(0)


class _Ranking(Sequence):
    """The first ``length`` results of a ranking, each made when first read: a search that
    follows duplicate links ranks deeper than ``k`` to let families vote, but shows only
    ``k`` (each result made costs its id and a :class:`Result`). ``make`` makes the results
    at a list of positions."""

    def __init__(
        self,
        make: Callable[[list[int]], list[Result]],
        length: int,
        ids: Callable[[range], list[str]] = lambda rows: [],
        scores: np.ndarray = _NO_SCORES,
        rows: np.ndarray | None = None,
    ):
        self._make, self._length, self._made = make, length, {}
        self._ids, self._scores = ids, scores
        self._rows = rows  # the candidates' row at each position (None: the same)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.results(range(self._length)[index])
        return self.results([range(self._length)[index]])[0]  # IndexError past the end

    def __iter__(self):
        return iter(self[:])

    def results(self, positions: Sequence[int]) -> list[Result]:
        """The results at ``positions``, those not made yet made at once."""
        missing = [p for p in positions if p not in self._made]
        if missing:
            self._made.update(zip(missing, self._make(missing), strict=True))
        return [self._made[p] for p in positions]

    def head(self, stop: int) -> tuple[list[str], list[float]]:
        """The ids and scores of the first ``stop``, without making their results (what
        the duplicate families vote with)."""
        stop = min(stop, self._length)
        return self._ids(range(stop)), self._scores[:stop].tolist()

    def head_rows(self, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The candidates' rows and the scores of the first ``stop`` (the families vote
        by vector slot: :func:`qres.ranking.duplicates.follow_by_slot`)."""
        stop = min(stop, self._length)
        rows = np.arange(stop) if self._rows is None else self._rows[:stop]
        return rows, self._scores[:stop]


def answer_count(extras: Mapping) -> int | None:
    """The question's answer count where its extras hold a whole number, else None."""
    count = extras.get("answer_count")
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def snippet(body: str, limit: int = SNIPPET_CHARS) -> str:
    """The first ``limit`` characters of ``body`` on one line, cut after a whole word."""
    text = " ".join(body.split())
    if len(text) <= limit:
        return text
    cut = text[: limit + 1].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut.rstrip(" ,.;:") + "…"


def _search_encoder(model_dir, threads, runtime):
    """(the opened model directory, its query encoder); a scorer search cannot apply is
    refused."""
    from qres.encoders.manifest import open_model
    from qres.encoders.runtime import Encoder

    loaded = open_model(model_dir)
    loaded.require_search_scorer()
    return loaded, Encoder.from_model(loaded, threads=threads, runtime=runtime)


class SearchPipeline:
    """BM25 candidates from ``backend``, rescored with ``encoder`` and fused by ``fusion``.

    ``mode`` is the default of :meth:`search`: hybrid with an encoder, else bm25.
    """

    def __init__(
        self,
        backend: Backend,
        encoder=None,
        fusion: Fusion = DEFAULT,
        candidates: int = DEFAULT_CANDIDATES,
        mode: str | None = None,
        dense_candidates: int = DEFAULT_DENSE_CANDIDATES,
    ):
        self.dense_candidates = dense_candidates
        self.encoders = list(encoder) if isinstance(encoder, list | tuple) else [encoder]
        self.encoders = [e for e in self.encoders if e is not None]
        encoder = self.encoders[0] if self.encoders else None
        self.backend, self.encoder, self.fusion, self.candidates = (
            backend,
            encoder,
            fusion,
            candidates,
        )
        self.mode = mode or ("hybrid" if encoder is not None else "bm25")
        self._owns_backend = False
        meta = backend.metadata()  # one read (a request on Elasticsearch)
        # A closed duplicate found gives way to its original (False: shown as itself), in an
        # index holding any duplicate links (qres.corpus.duplicate_links).
        self.follow_duplicates = bool(meta.get(duplicate_links.INDEX_FLAG))
        for e in self.encoders:
            check_model_matches(backend, e)
        # In an index of several models, query vectors are handed over by fingerprint.
        self._keyed = bool(self.encoders) and len(index_models(meta)) > 1
        # The models whose nearest questions join the candidates (None: every model's).
        self.first_stage: set[str] | None = None
        if self.encoders:
            from qres.encoders.model_set import first_stage_of

            self.first_stage = first_stage_of([e.fingerprint for e in self.encoders])
        if len(self.encoders) > 1 and fusion.models != [e.fingerprint for e in self.encoders]:
            raise BackendError(
                f"the fusion ({fusion.source}) does not fuse models "
                f"{', '.join(short(e.fingerprint) for e in self.encoders)} in that order"
            )

    @classmethod
    def open(
        cls,
        index_dir: str | Path | None = None,
        model: str | Path | None = None,
        *,
        mode: str | None = None,
        backend: str | None = None,
        candidates: int = DEFAULT_CANDIDATES,
        **settings,
    ) -> SearchPipeline:
        """The pipeline ``qres search`` runs over the index at ``index_dir`` (default
        ``$QRES_HOME/index``; ``backend``/``settings`` as for
        :func:`qres.backends.open_backend`). Close it, or use it in a ``with`` block."""
        from qres import paths
        from qres.backends import open_backend

        store = open_backend(backend, index_dir or paths.default_index_dir(), **settings)
        try:
            pipeline = cls.for_index(store, model, mode, candidates)
        except BaseException:
            store.close()
            raise
        pipeline._owns_backend = True
        return pipeline

    @classmethod
    def for_index(
        cls,
        backend: Backend,
        model: str | Path | None = None,
        mode: str | None = None,
        candidates: int = DEFAULT_CANDIDATES,
        threads: int | None = None,
        device: str | None = None,
        fusion: str | Path | None = None,
        dense_candidates: int = DEFAULT_DENSE_CANDIDATES,
    ) -> SearchPipeline:
        """A pipeline over an open ``backend``: ``model`` or, unless ``mode`` is bm25, the
        model the index was built with (every model, in an index of several), and the fusion
        weights saved with that model, or the fusion file ``fusion``; ``dense_candidates``
        nearest questions join BM25's ``candidates`` (``threads``:
        onnxruntime threads per encoding, see :meth:`Encoder.from_model`; ``device`` as for
        :meth:`qres.encoders.runtime.Runtime.from_env`)."""
        meta = backend.metadata()
        if mode == "bm25":  # BM25 needs no model: whatever ``model`` names is not loaded
            model = None
        held = index_models(meta)
        if model is None and mode != "bm25" and len(held) > 1:
            pipeline = cls._for_models(backend, held, mode, candidates, threads, device, fusion)
            pipeline.dense_candidates = dense_candidates
            return pipeline
        if model is None and mode != "bm25" and meta.get("model_dir"):
            model = Path(meta["model_dir"])
        if model is None:
            if mode in ("dense", "hybrid"):
                raise BackendError(
                    f"--mode {mode} needs vectors: index with --model-set NAME or --model DIR"
                )
            return cls(backend, candidates=candidates, mode="bm25")
        from qres.encoders.runtime import Runtime

        loaded, encoder = _search_encoder(model, threads, Runtime.from_env(device))
        chosen = Fusion.read(fusion) if fusion is not None else Fusion.for_model(loaded)
        return cls(backend, encoder, chosen, candidates, mode or "hybrid", dense_candidates)

    @classmethod
    def _for_models(cls, backend, held, mode, candidates, threads, device, fusion_file):
        """The pipeline over every model of an index of several, in the fusion's order."""
        from qres.encoders.runtime import EncoderError, Runtime

        runtime = Runtime.from_env(device)
        encoders = {}
        for m in held:
            try:
                _, encoder = _search_encoder(m["model_dir"] or "", threads, runtime)
            except EncoderError as err:
                raise BackendError(
                    f"model {short(m['model_fingerprint'])} of this index cannot be loaded "
                    f"({err}): restore it at {m['model_dir']}, or search with --mode bm25"
                ) from None
            encoders[m["model_fingerprint"]] = encoder
        if fusion_file is None:
            fusion = shipped_fusion_for(list(encoders)) or Fusion.equal(list(encoders))
        else:
            fusion = Fusion.read(fusion_file)
            if sorted(fusion.models or []) != sorted(encoders):
                raise BackendError(
                    f"{fusion_file} fuses models "
                    f"{', '.join(map(short, fusion.models or [])) or '(one, unnamed)'} "
                    f"but this index holds {', '.join(map(short, encoders))}: "
                    "tune a fusion of the index's models with `qres tune-fusion --cv K "
                    "--model A --model B --out FILE`"
                )
        ordered = [encoders[fp] for fp in fusion.models]
        return cls(backend, ordered, fusion, candidates, mode or "hybrid")

    def close(self) -> None:
        """Close the backend if :meth:`open` opened it."""
        if self._owns_backend:
            self.backend.close()

    def __enter__(self) -> SearchPipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def search(
        self,
        text: str,
        k: int = 10,
        mode: str | None = None,
        only_ids: Sequence[str] | None = None,
        query_vector: np.ndarray | None = None,
        *,
        with_text: bool = True,
        links_before: str | None = None,
        typing: bool = False,
    ) -> list[Result]:
        """Top ``k`` for ``text`` in ``mode`` (default :attr:`mode`); ``query_vector``
        replaces encoding ``text`` (evaluation encodes a whole question, title and body).
        Each result carries its question's title, tags, a snippet of its body, its answer
        count and other extras where stored, read from the index for these k only
        (``with_text=False``: ranking alone, as evaluation does). Searching the whole index,
        a question closed as a duplicate gives way to its original
        (:mod:`qres.ranking.duplicates`; ``links_before``: only links made before then).
        ``typing``: ``text`` is being typed, its last word maybe unfinished
        (:meth:`search_typed`)."""
        options = dict(only_ids=only_ids, with_text=with_text, links_before=links_before)
        if typing and query_vector is None:
            return self.search_typed(text, k, mode, **options)[1]
        return self._search(text, k, mode, query_vector=query_vector, **options)

    def search_typed(self, text: str, k: int = 10, mode: str | None = None, **options):
        """The text a title being typed is searched as (:meth:`complete_typed`: its last
        word completed) and :meth:`search`'s results for it (``options``: its only_ids,
        with_text, links_before); where the completion left the text as typed, its BM25
        candidates are the search's, not searched again."""
        mode = mode or self.mode
        if options.get("only_ids") is not None:
            window = 0  # the search reads only those: nothing to reuse
        elif mode == "bm25":  # its own top depth: the completion's top is deep enough
            window = self._depth(k) if self.follow_duplicates else k
        else:
            window = self._rescored(k) if self.encoder is not None else 0
        searched_text, found = completion.completed(self.backend, text, window, mode != "bm25")
        return searched_text, self._search(searched_text, k, mode, searched=found, **options)

    def _search(
        self,
        text,
        k,
        mode,
        only_ids=None,
        query_vector=None,
        with_text=True,
        links_before=None,
        searched=None,
    ) -> list[Result]:
        mode = mode or self.mode
        if mode != "bm25" and self.encoder is not None:
            query_vector = self._query_vectors(text, query_vector)
        stored: dict = {}
        if self.follow_duplicates and only_ids is None:
            results, stored, found = self._following_duplicates(
                text, k, mode, query_vector, links_before, searched
            )
        else:
            ranked, found = self._ranked(text, k, mode, only_ids, query_vector, None, searched)
            results = ranked[:]
        if not with_text or not results:
            return results
        missing = [r.id for r in results if r.id not in stored]
        stored = {**stored, **found.stored(missing, self.backend.fetch)}
        shown = []
        for r in results:
            q = stored.get(r.id)
            if q is not None:
                r = replace(
                    r,
                    title=q.title,
                    tags=tuple(q.tags),
                    snippet=snippet(q.body),
                    answer_count=answer_count(q.extras),
                    extras=dict(q.extras),
                )
            shown.append(r)
        return shown

    def complete_typed(self, text: str) -> str:
        """``text`` with its last word completed from the titles of its best BM25 matches
        (:mod:`qres.ranking.completion`), as a title being typed is searched."""
        return completion.completed(self.backend, text, 0)[0]

    def _depth(self, k: int) -> int:
        """How deep a top ``k`` that follows duplicate links is ranked first: its families'
        voters, or twice ``k``."""
        return max(duplicates.VOTERS, 2 * k)

    def _rescored(self, k: int) -> int:
        """How many of BM25's best a dense or hybrid top ``k`` rescores."""
        return max(k, self.candidates)

    def _following_duplicates(self, text, k, mode, query_vector, links_before, searched=None):
        """The top ``k`` once closed duplicates gave way to their originals, the questions
        read to know it, and the candidates ranked; ranks deeper while duplicates leave fewer
        than ``k``."""
        depth = self._depth(k)
        while True:
            ranked, found = self._ranked(text, k, mode, None, query_vector, depth, searched)
            shown, stored = None, {}
            if links_before is None:
                shown = duplicates.follow_by_slot(ranked, found, k)
            if shown is None:
                # the ranked questions are read where the search found them, others by id
                fetch = partial(found.stored, fetch=self.backend.fetch)
                shown, stored = duplicates.follow(ranked, fetch, k, links_before, found.not_closed)
            if len(shown) >= k or len(ranked) < depth:
                return shown, stored, found
            depth *= 2
            if (mode or self.mode) == "bm25":  # BM25's searched top is the depth: now short
                searched = None

    def _query_vectors(self, text, query_vector):
        """The query's vector (``{fingerprint: vector}`` in an index of several models),
        encoded unless given."""
        several = len(self.encoders) > 1
        if query_vector is None and several:
            query_vector = {e.fingerprint: e.encode_query(text) for e in self.encoders}
        elif query_vector is None:
            query_vector = self.encoder.encode_query(text)
        elif several and not isinstance(query_vector, dict):
            raise ValueError("an index of several models needs a query vector per model")
        if self._keyed and not isinstance(query_vector, dict):
            query_vector = {self.encoder.fingerprint: query_vector}
        return query_vector

    def _ranked(self, text, k, mode, only_ids, query_vector, depth=None, searched=None):
        """The first ``depth`` (default ``k``) of the ranking a top ``k`` is cut from (a
        :class:`_Ranking`: each result made when first read), and the candidates ranked
        (which read the results' stored questions cheaply): the candidates to rescore are
        those of a top ``k`` whatever the depth (``searched``: BM25's, already searched)."""
        depth = depth or k
        mode = mode or self.mode
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
        if k < 1:
            raise ValueError(f"k must be at least 1, not {k}")
        if mode == "bm25":
            window = depth  # nothing is rescored: the engine's own top k
        else:
            window = self._rescored(k) if only_ids is None else len(only_ids)
        if mode == "bm25" or self.encoder is None:
            if mode == "bm25" and searched is not None:
                found = searched  # the completion's search of this text, at least this deep
            else:
                found = self.backend.candidates(text, window, only_ids=only_ids)
            if mode == "bm25" or not len(found):

                def bm25_results(positions: list[int]) -> list[Result]:
                    scores = found.scores[positions].tolist()
                    ids = found.ids(positions)
                    return [Result(i, s, s, None) for i, s in zip(ids, scores, strict=True)]

                length = min(depth, len(found))
                return _Ranking(bm25_results, length, found.ids, found.scores[:length]), found
            raise BackendError(f"{mode} search needs a model: pass --model MODEL_DIR")
        several = len(self.encoders) > 1
        query_vector = self._query_vectors(text, query_vector)
        found = self.candidate_set(text, window, query_vector, only_ids, searched)
        if not len(found):
            return _Ranking(lambda positions: [], 0), found
        bm25 = found.scores.astype(np.float32)
        cosine, has_vector = found.cosine, found.has_vector
        cosines = [found.cosines[e.fingerprint] for e in self.encoders] if several else [cosine]
        if several:
            cosine = self.fusion.cosine_of(cosines)
        score = cosine if mode == "dense" else self.fusion.score(bm25, cosines)
        # Rescored candidates first by score; the ones without a vector after them, BM25 order
        # (lexsort is stable: equal scores keep their BM25 order too).
        position = np.arange(len(found))
        order = np.lexsort((np.where(has_vector, -score, position), ~has_vector))[:depth]
        shown = np.where(has_vector, score, normalize_bm25(bm25))  # no vector: BM25's scale

        def fused_results(positions: list[int]) -> list[Result]:
            rows = order[positions]
            return [
                Result(
                    qid,
                    float(shown[i]),
                    float(bm25[i]),
                    float(cosine[i]) if has_vector[i] else None,
                    tuple(float(c[i]) for c in cosines) if several and has_vector[i] else None,
                )
                for qid, i in zip(found.ids(rows), rows, strict=True)
            ]

        ranked_ids = lambda rows: found.ids(order[rows])  # noqa: E731
        return _Ranking(fused_results, len(order), ranked_ids, shown[order], order), found

    def candidate_set(
        self,
        text: str,
        window: int,
        query_vector,
        only_ids: Sequence[str] | None = None,
        searched: Candidates | None = None,
    ) -> Candidates:
        """What dense and hybrid rescore: BM25's top ``window`` (or ``only_ids``) with their
        cosines, and, searching the whole index, the nearest questions joining them.
        ``searched``: that top ``window``, already searched without cosines."""
        found = searched.rescored(query_vector) if searched is not None else None
        if found is None:
            found = self.backend.candidates(text, window, only_ids, query_vector)
        # A query that matches no indexed word still finds nothing (its vector alone is noise).
        dense = only_ids is None and self.dense_candidates > 0 and len(found)
        if dense and self.backend.supports_nearest:
            found = self._with_nearest(text, found, query_vector)
        return found

    def _with_nearest(self, text: str, found: Candidates, query_vector) -> Candidates:
        """``found`` and, after it, each first-stage model's nearest questions it does not
        hold."""
        vectors = query_vector if isinstance(query_vector, dict) else {None: query_vector}
        held = set(found.ids(range(len(found))))
        extra = []
        for fingerprint, vector in vectors.items():
            # one model: its vector comes unkeyed (None)
            model = fingerprint or self.encoders[0].fingerprint
            if self.first_stage is not None and model not in self.first_stage:
                continue
            for hit in self.backend.nearest(vector, self.dense_candidates, model=fingerprint):
                if hit.id not in held:
                    held.add(hit.id)
                    extra.append(hit.id)
        if not extra:
            return found
        more = self.backend.candidates(text, len(extra), extra, query_vector)
        return Candidates.joined(found, more)


def search_log_record(
    text: str, mode: str, k: int, latency_ms: float, results: Sequence[Result], backend: Backend
) -> dict:
    """One search as the search log (``--log-queries``, Kibana's dashboard) records it."""
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "query": text,
        "mode": mode,
        "k": k,
        "latency_ms": round(latency_ms, 3),
        "top_ids": [r.id for r in results],
        "top_scores": [r.score for r in results],
        "result_count": len(results),
        "backend": backend.name,
    }


def model_labels(encoders) -> list[str]:
    """A label per model: its directory's name ("minilm"; the shipped GRU's directory,
    "default", by its architecture: "gru"), with the fingerprint's first 8 hex digits added
    where two models share a name."""
    names = [_model_name(e) for e in encoders]
    return [
        name if names.count(name) == 1 else f"{name} {e.fingerprint[:8]}"
        for name, e in zip(names, encoders, strict=True)
    ]


def _model_name(encoder) -> str:
    name = Path(encoder.model_dir).name
    if name == "default":  # says nothing beside "minilm", "mpnet": name it by what it is
        name = str(getattr(encoder, "card", {}).get("architecture") or name)
    return name
