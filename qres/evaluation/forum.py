"""Full-forum duplicate search on a StackExchange dump (``qres evaluate --dataset
stackexchange``, ``qres tune-fusion --dataset stackexchange``).

Each question closed as a duplicate (:mod:`qres.datasets.forum_duplicates`) searches the
whole indexed forum with its title and body through the production :class:`SearchPipeline`,
its own id left out, as of the time it was closed: a question found that the forum had
closed as a duplicate before then gives way to its original (:mod:`qres.ranking.duplicates`;
``qres evaluate --no-links`` ranks on the text alone). Its top :data:`FORUM_DEPTH` is scored
as :data:`FORUM_COLUMNS` with binary gains over its linked originals (:func:`score_forum`).

Fusion fitting (:func:`forum_candidate_lists`): each query's candidates are what the
production pipeline rescores (BM25's top K together with the questions nearest its vector),
each with its BM25 score and cosine, labelled by its links; the number of originals the
candidates missed is kept, so nDCG@10 and recall count them as misses.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np

from qres.corpus import duplicate_links
from qres.corpus.readers import read_corpus
from qres.datasets import forum_duplicates
from qres.evaluation import ranking_metrics as metrics
from qres.evaluation.benchmark import Benchmark, Evaluation, SetupError

FORUM_COLUMNS = ("R@1", "R@10", "R@100", "MRR@10", "nDCG@10")
FORUM_DEPTH = 100  # how deep each forum query's ranking goes (R@100)


def load_forum(split: str, data_dir: Path | None, links: bool = True) -> Benchmark:
    if split not in forum_duplicates.SPLITS:
        raise SetupError(
            "--split", f"stackexchange splits are {', '.join(forum_duplicates.SPLITS)}"
        )
    forum = forum_duplicates.load_forum_duplicates(data_dir, split)
    return Benchmark(
        "stackexchange",
        split,
        forum.queries,
        {q.id: q.question for q in forum.queries},
        forum.corpus if links else partial(read_corpus, forum.posts, "stackexchange"),
        True,
        has_given_order=False,
        source=forum.posts,
        folder=forum.posts.parent,
        whole_forum=True,
        with_links=links,
    )


def sampled(benchmark: Benchmark, searched: int) -> Benchmark:
    """``benchmark`` searching ``searched`` of its forum's questions where it holds more:
    every question its duplicate links join (each query's originals among them), then the
    others in an order fixed by their ids (a sample that is the same on every run), so that
    a large forum is measured in bounded time. Scores then run higher than over the whole
    forum (fewer questions to confuse), for every model alike."""
    posts = benchmark.source
    stat = posts.stat()
    kept = _sample(posts, benchmark.folder, searched, (stat.st_mtime_ns, stat.st_size))
    if kept is None:
        return benchmark

    def corpus() -> Iterator:
        return (q for q in benchmark.corpus() if q.id in kept)

    return replace(benchmark, corpus=corpus, searched=len(kept))


@functools.lru_cache(maxsize=8)
def _sample(posts: Path, folder: Path, searched: int, _stamp) -> frozenset[str] | None:
    """The ids :func:`sampled` keeps (None: the forum holds no more than ``searched``), worked
    out once per dump (``_stamp``: its modification time and size) and reused by each query
    form and by the fusion's fit, which read the whole dump for it."""
    held = {q.id for q in read_corpus(posts, "stackexchange")}
    if len(held) <= searched:
        return None
    links = duplicate_links.read_links(forum_duplicates.links_file(folder))
    kept = {i for duplicate, original, _ in links for i in (duplicate, original)} & held
    rest = sorted(held - kept, key=lambda i: (zlib.crc32(i.encode()), i))
    return frozenset(kept | set(rest[: max(0, searched - len(kept))]))


def score_forum(benchmark: Benchmark, ranker: str, tops: list) -> Evaluation:
    """Each query's top of the whole forum (``(id, score)`` best first, the query left
    out), scored as :data:`FORUM_COLUMNS` (percent; binary gains, R = its linked originals)."""
    per_query, ranked = [], {}
    for q, top in zip(benchmark.queries, tops, strict=True):
        hits, n = [d in q.relevant for d, _ in top], len(q.relevant)
        ranked[q.id] = top
        per_query.append(
            {
                "query": q.id,
                "relevant": n,
                "R@1": 100 * metrics.recall_at(hits, 1, n),
                "R@10": 100 * metrics.recall_at(hits, 10, n),
                "R@100": 100 * metrics.recall_at(hits, 100, n),
                "MRR@10": 100 * metrics.reciprocal_rank_at(hits, 10),
                "nDCG@10": 100 * metrics.ndcg_at(hits, 10, n),
            }
        )
    summary: dict = {
        c: float(np.mean([r[c] for r in per_query])) if per_query else 0.0 for c in FORUM_COLUMNS
    }
    summary["queries"] = len(per_query)
    return Evaluation(benchmark.dataset, benchmark.split, ranker, summary, per_query, ranked)
