"""Fitting the fusion on a forum's own duplicate links (``qres tune-fusion --dataset
stackexchange``), by cross-validation over its train split only.

Each train-split query becomes a :class:`CandidateList`: the candidates the production
pipeline rescores for it (BM25's top K together with the questions nearest its vector), each
with its BM25 score and one cosine per model, labelled by the query's links, and the number of
its originals (the ones the candidates missed count as misses in nDCG@10 and R@10). BM25 is
divided by the top BM25 of the candidates as search sees them, the query's own question
included (it is in the forum), then that question's row is dropped, as evaluation drops it.

The fusions of :mod:`qres.evaluation.fusion_fit` are compared by K-fold cross-validated
nDCG@10 (folds by query); the best is refitted on every train query. The test split is never
read: ``qres evaluate --dataset stackexchange --split test`` applies the fit. An encoder
fine-tuned on the train split makes its cosine look far better there than it is: fit its
fusion with ``held_out`` on the newest tenth it was not trained on (``qres train
--hold-out``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np

from qres.backends.base import Backend
from qres.datasets.forum_duplicates import held_out_cut
from qres.evaluation.benchmark import Benchmark
from qres.evaluation.forum import FORUM_DEPTH, sampled
from qres.evaluation.fusion_fit import CandidateList, compare_fusions, fusion_from
from qres.evaluation.rankers import ensure_index
from qres.evaluation.runner import eval_index_name, load_benchmark
from qres.ranking.fusion import Fusion, signals
from qres.ranking.search import DEFAULT_CANDIDATES, DEFAULT_DENSE_CANDIDATES, SearchPipeline

MEASURE = "nDCG@10"
SPLIT = "train"
# What `qres tune-fusion --dataset stackexchange --split dev` says: --split picks a SemEval split.
SPLIT_FIXED = (
    f"the forum fusion is always fitted on the forum's {SPLIT} split (by cross-validation) and "
    "its test split is never read; leave out --split, which picks a SemEval split"
)


def index_key(encoders) -> str:
    """The evaluation index's model key, as ``qres evaluate`` names it (so both share it)."""
    if len(encoders) == 1:
        return encoders[0].fingerprint[:16]
    return "+".join(sorted(e.fingerprint[:12] for e in encoders))


def candidate_lists(
    benchmark: Benchmark,
    backend: Backend,
    encoders: Sequence,
    dense_candidates: int = DEFAULT_DENSE_CANDIDATES,
    candidates: int = DEFAULT_CANDIDATES,
) -> list[CandidateList]:
    """Every query's rescored candidates with [bm25/top, cosine per model] and labels."""
    ensure_index(backend, benchmark.corpus, _model(encoders))
    fusion = Fusion.equal([e.fingerprint for e in encoders]) if len(encoders) > 1 else None
    pipeline = SearchPipeline(
        backend,
        list(encoders),
        candidates=candidates,
        dense_candidates=dense_candidates,
        **({"fusion": fusion} if fusion else {}),
    )
    questions = [q.question for q in benchmark.queries]
    vectors = [e.encode_questions(questions) for e in encoders]
    # BM25's window as evaluation searches (its top FORUM_DEPTH + the query's own question).
    window = max(FORUM_DEPTH + 1, candidates)
    lists = []
    for i, q in enumerate(benchmark.queries):
        by_model = {e.fingerprint: v[i] for e, v in zip(encoders, vectors, strict=True)}
        vector = by_model if len(encoders) > 1 else vectors[0][i]
        found = pipeline.candidate_set(q.question.text, window, vector)
        if len(encoders) > 1:
            cosines = [found.cosines[e.fingerprint] for e in encoders]
        else:
            cosines = [found.cosine]
        x = signals(np.asarray(found.scores, dtype=np.float64), cosines)
        ids = found.ids(range(len(found)))
        keep = np.array([d != q.id for d in ids], dtype=bool) & np.asarray(found.has_vector)
        labels = np.array([d in q.relevant for d in ids], dtype=bool)
        lists.append(
            CandidateList(
                q.id, benchmark.split, x[keep], labels[keep], len(q.relevant), "stackexchange"
            )
        )
    return lists


def train_split(data_dir: Path | None, held_out: bool = False, links: bool = True) -> Benchmark:
    """The forum's train split (``held_out``: its newest tenth, which ``qres train
    --hold-out`` kept from the encoder; ``links``: its evaluation index holds the duplicate
    links, which the candidates do not depend on)."""
    benchmark = load_benchmark("stackexchange", SPLIT, data_dir, links=links)
    if held_out:
        benchmark.queries = benchmark.queries[held_out_cut(len(benchmark.queries)) :]
    return benchmark


def originals(benchmark: Benchmark) -> dict[str, list[str]]:
    """Each query's originals, kept with a fit's folds: forum ids repeat across forums, so
    evaluation takes a query for one fitted on only when its originals match too."""
    return {q.id: sorted(q.relevant) for q in benchmark.queries}


def encode_forum(
    benchmark: Benchmark,
    encoders: Sequence,
    open_index: Callable[[str], AbstractContextManager[Backend]],
    progress: Callable[[float], None] | None = None,
) -> None:
    """Fill the evaluation index of ``benchmark``'s forum for ``encoders`` ahead of the
    searches (the index ``qres evaluate`` and the fusion's fit share), ``progress(n)`` told
    of the questions encoded."""
    with open_index(eval_index_name(benchmark, index_key(encoders))) as backend:
        ensure_index(backend, benchmark.corpus, _model(encoders), progress)


def _model(encoders: Sequence):
    """What :func:`ensure_index` takes: one encoder, or a list of several."""
    return list(encoders) if len(encoders) > 1 else encoders[0]


def indexed_lists(
    benchmark: Benchmark,
    encoders: Sequence,
    open_index: Callable[[str], AbstractContextManager[Backend]],
    dense_candidates: int = DEFAULT_DENSE_CANDIDATES,
) -> list[CandidateList]:
    """:func:`candidate_lists` from the evaluation index that ``qres evaluate`` shares."""
    with open_index(eval_index_name(benchmark, index_key(encoders))) as backend:
        return candidate_lists(benchmark, backend, encoders, dense_candidates)


def tune(
    data_dir: Path | None,
    encoders: Sequence,
    open_index: Callable[[str], AbstractContextManager[Backend]],
    folds: int,
    method: str = "auto",
    dense_candidates: int = DEFAULT_DENSE_CANDIDATES,
    names: Sequence[str] | None = None,
    held_out: bool = False,
    links: bool = True,
    searched: int | None = None,
) -> tuple[dict, Fusion]:
    """Cross-validate the fusions over the forum's train split (``held_out``: over its
    newest tenth only, the queries ``qres train --hold-out`` kept from the encoder;
    ``searched``: a part of a large forum, :func:`qres.evaluation.forum.sampled`); (the
    comparison of :func:`compare_fusions`, the chosen fusion refitted on all those queries)."""
    benchmark = train_split(data_dir, held_out, links)
    if searched is not None:
        benchmark = sampled(benchmark, searched)
    if len(benchmark.queries) < folds:
        raise ValueError(
            f"{len(benchmark.queries)} queries cannot be cross-validated in {folds} folds"
        )
    lists = indexed_lists(benchmark, encoders, open_index, dense_candidates)
    labels = list(names) if names else [Path(e.model_dir).name for e in encoders]
    result = compare_fusions(lists, ["bm25", *labels], folds, method, measure=MEASURE)
    result["record"]["originals"] = originals(benchmark)
    result["record"]["dense_candidates"] = dense_candidates
    result["record"]["held_out_only"] = held_out
    result["record"]["searched"] = benchmark.searched  # None: the whole forum
    result["record"]["candidates_per_query"] = float(np.mean([len(c.labels) for c in lists]))
    result["record"]["originals_in_candidates"] = 100 * float(
        np.sum([c.labels.sum() for c in lists]) / max(1, sum(c.relevant for c in lists))
    )
    fusion = fusion_from(result, [e.fingerprint for e in encoders], dataset="stackexchange")
    return result, fusion
