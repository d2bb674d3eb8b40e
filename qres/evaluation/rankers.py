"""The rankers ``qres evaluate`` scores, each ``score(query, candidates)`` (every candidate
with its score, best first) and ``top(queries, k)`` (the first k of the whole corpus):

* ``given-order`` — the order the dataset ships: AskUbuntu's Lucene BM25 scores, SemEval's
  search-engine order (RELQ_RANKING_ORDER); Android pairs have none;
* ``bm25``, ``dense``, ``hybrid`` — qres's own :class:`qres.ranking.search.SearchPipeline`, the
  production query path, restricted to the query's candidates. The texts are indexed into an
  evaluation index (SemEval: every related question of the train and dev files; AskUbuntu:
  the queries and candidates of the corpus file given with ``corpus``; Android: its corpus);
* ``bow-cnn`` — a BOW-CNN model's similarity (:mod:`qres.encoders.bowcnn_scorer`), no index needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import islice

import numpy as np

from qres import paths
from qres.backends import open_backend
from qres.backends.base import Backend, BackendError, IndexFormatError, index_models
from qres.corpus.readers import Question
from qres.indexing.pipeline import index_questions
from qres.ranking import duplicates
from qres.ranking.search import DEFAULT_DENSE_CANDIDATES, MODES, SearchPipeline

RANKERS = ("given-order", "bm25", "dense", "hybrid", "bow-cnn")
# Corpus questions the BOW-CNN scorer compares with all queries at once (bounds memory).
SCORING_CHUNK = 4096


class PipelineRanker:
    """``bm25``, ``dense`` or ``hybrid`` through the production :class:`SearchPipeline`.

    ``corpus_pipeline`` searches the whole corpus for Accuracy@k when that lives in another
    index than the candidates (AskUbuntu); by default it is ``pipeline``.
    """

    def __init__(
        self,
        pipeline: SearchPipeline,
        mode: str,
        corpus_pipeline: SearchPipeline | None = None,
        typing: bool = False,
    ):
        self.pipeline, self.mode = pipeline, mode
        self.corpus_pipeline = corpus_pipeline or pipeline
        self.typing = typing  # a title query's last word is completed first, as typed

    def _asked(self, question: Question, pipeline: SearchPipeline) -> Question:
        """``question`` as searched: with :attr:`typing`, its title completed as typed."""
        if not self.typing:
            return question
        return replace(question, title=pipeline.complete_typed(question.title))

    def _vector(self, question: Question, pipeline: SearchPipeline):
        """Evaluation encodes the whole question (title and body), as the index does."""
        if self.mode == "bm25":
            return None
        if len(pipeline.encoders) > 1:  # an index of several models: a vector per model
            return {e.fingerprint: e.encode_questions([question])[0] for e in pipeline.encoders}
        return pipeline.encoder.encode_questions([question])[0]

    def score(self, query: Question, candidates: Sequence[str]) -> list[tuple[str, float]]:
        """Every candidate with its score, best first; any the index does not return follow,
        in their given order, with score -inf."""
        query = self._asked(query, self.pipeline)
        vector = self._vector(query, self.pipeline)
        pipeline = self._held_out(query.id)
        results = pipeline.search(
            query.text, len(candidates), self.mode, candidates, vector, with_text=False
        )
        scored = [(r.id, r.score) for r in results]
        returned = {r.id for r in results}
        return scored + [(c, float("-inf")) for c in candidates if c not in returned]

    def _held_out(self, query_id: str) -> SearchPipeline:
        """A query the fusion was cross-validated on is fused as in its held-out fold."""
        fusion = self.pipeline.fusion
        if self.mode != "hybrid" or fusion.for_query(query_id) is fusion:
            return self.pipeline
        p = self.pipeline
        return SearchPipeline(
            p.backend,
            p.encoders,
            fusion.for_query(query_id),
            p.candidates,
            dense_candidates=p.dense_candidates,
        )

    def top(self, queries: Sequence[Question], k: int) -> list[list[str]]:
        """The first ``k`` corpus questions of each query, the query itself left out."""
        return [[qid for qid, _ in top] for top in self.top_scored(queries, k)]

    def top_scored(self, queries: Sequence[Question], k: int) -> list[list[tuple[str, float]]]:
        """:meth:`top` with each question's score."""
        tops = []
        for query in queries:
            query = self._asked(query, self.corpus_pipeline)
            vector = self._vector(query, self.corpus_pipeline)
            pipeline = self.corpus_pipeline
            if pipeline is self.pipeline:  # a forum: the fusion's held-out fold, as in score
                pipeline = self._held_out(query.id)
            # The forum as it was when the query was closed: only older links are followed.
            since = duplicates.first_closed(query.extras)
            results = pipeline.search(
                query.text, k + 1, self.mode, None, vector, with_text=False, links_before=since
            )
            tops.append([(r.id, r.score) for r in results if r.id != query.id][:k])
        return tops


class BowCnnRanker:
    """A BOW-CNN scorer's similarity (``scorer.similarity(queries, candidates)`` → [nq, nc]).

    ``texts`` holds the candidates' questions; ``corpus`` yields every corpus question, for
    Accuracy@k.
    """

    def __init__(
        self,
        scorer,
        texts: Mapping[str, Question],
        corpus: Callable[[], Iterable[Question]] | None = None,
        chunk: int = SCORING_CHUNK,
    ):
        self.scorer, self.texts, self.corpus, self.chunk = scorer, texts, corpus, chunk

    def score(self, query: Question, candidates: Sequence[str]) -> list[tuple[str, float]]:
        known = [c for c in candidates if c in self.texts]
        sims = self.scorer.similarity([query], [self.texts[c] for c in known])[0] if known else []
        order = np.argsort(-np.asarray(sims, dtype=float), kind="stable")
        scored = [(known[i], float(sims[i])) for i in order]
        missing = set(candidates) - set(known)
        return scored + [(c, float("-inf")) for c in candidates if c in missing]

    def top(self, queries: Sequence[Question], k: int) -> list[list[str]]:
        """Every query against the corpus, chunk by chunk, keeping each query's best ``k``."""
        if self.corpus is None:
            raise ValueError("Accuracy@k with bow-cnn needs the corpus")
        if not queries:
            return []
        best_scores = np.empty((len(queries), 0))
        best_rows = np.empty((len(queries), 0), dtype=int)
        ids: list[str] = []
        questions = iter(self.corpus())
        while chunk := list(islice(questions, self.chunk)):
            sims = np.asarray(self.scorer.similarity(queries, chunk), dtype=float)
            chunk_ids = [q.id for q in chunk]
            position = {qid: j for j, qid in enumerate(chunk_ids)}
            for i, query in enumerate(queries):
                if query.id in position:
                    sims[i, position[query.id]] = -np.inf
            rows = np.broadcast_to(np.arange(len(ids), len(ids) + len(chunk)), sims.shape)
            ids += chunk_ids
            all_scores = np.hstack([best_scores, sims])
            all_rows = np.hstack([best_rows, rows])
            # Stable, so equal scores keep corpus order.
            keep = np.argsort(-all_scores, axis=1, kind="stable")[:, :k]
            best_scores = np.take_along_axis(all_scores, keep, axis=1)
            best_rows = np.take_along_axis(all_rows, keep, axis=1)
        return [
            [ids[j] for j, s in zip(rows, scores, strict=True) if s != -np.inf]
            for rows, scores in zip(best_rows, best_scores, strict=True)
        ]


def make_ranker(
    ranker: str,
    backend: Backend | None,
    encoder,
    fusion,
    scorer,
    texts: Mapping[str, Question],
    corpus: Callable[[], Iterable[Question]],
    indexed: Callable[[], Iterable[Question]] | None = None,
    corpus_backend: Backend | None = None,
    dense_candidates: int = DEFAULT_DENSE_CANDIDATES,
    typing: bool = False,
):
    """The ranker object for ``ranker`` (None for given-order).

    ``texts``: the queries' and candidates' questions; ``corpus``: every question Acc@k ranks;
    ``indexed``: what ``backend`` is filled with on first use (default ``corpus``);
    ``corpus_backend``: an index of ``corpus`` apart from ``backend``, for Acc@k;
    ``typing``: title queries searched as typed (:class:`PipelineRanker`).
    """
    if ranker == "given-order":
        return None
    if ranker == "bow-cnn":
        if scorer is None:
            raise BackendError("the bow-cnn ranker needs --model DIR of a BOW-CNN export")
        return BowCnnRanker(scorer, texts, corpus)
    if ranker not in MODES:
        raise ValueError(f"unknown ranker {ranker!r} (one of {', '.join(RANKERS)})")
    ensure_index(backend, indexed or corpus, encoder)
    corpus_pipeline = None
    if corpus_backend is not None:
        ensure_index(corpus_backend, corpus, encoder)
        corpus_pipeline = _pipeline(corpus_backend, encoder, fusion, dense_candidates)
    pipeline = _pipeline(backend, encoder, fusion, dense_candidates)
    return PipelineRanker(pipeline, ranker, corpus_pipeline, typing)


def open_eval_index(backend_name: str | None, name: str) -> Backend:
    """The evaluation index ``name`` (``$QRES_HOME/eval/NAME``; on Elasticsearch the index
    ``qres-eval-NAME``, never the live one), made if missing; a cache written by an older
    qres is rebuilt afresh and swapped in."""
    index_dir = paths.home() / "eval" / name

    def open_it(**rebuild) -> Backend:
        index = f"qres-eval-{name}".lower()
        return open_backend(backend_name, index_dir, True, index=index, **rebuild)

    try:
        return open_it()
    except IndexFormatError:
        return open_it(rebuild=True)


def ensure_index(
    backend: Backend,
    questions: Callable[[], Iterable[Question]],
    encoder=None,
    progress: Callable[[float], None] | None = None,
) -> None:
    """Fill an evaluation index once (re-used while its model fingerprint matches);
    ``progress(n)`` is told of the questions encoded as they are."""
    several = isinstance(encoder, list | tuple)
    encoders = list(encoder) if several else [encoder] if encoder is not None else []
    held = sorted(m["model_fingerprint"] for m in index_models(backend.metadata()))
    if backend.count() > 0 and held == sorted(e.fingerprint for e in encoders):
        return
    encoder = encoders if several else encoder
    index_questions(backend, questions(), encoder=encoder, on_encoded=progress)


def _pipeline(backend, encoder, fusion, dense_candidates) -> SearchPipeline:
    kwargs = {"fusion": fusion} if fusion is not None else {}
    return SearchPipeline(backend, encoder, dense_candidates=dense_candidates, **kwargs)
