"""Single-query latency of a backend, beside bm25s in the same process, as JSON.

    python benchmarks/search_latency.py --docs 100000 [--model qres/models/default]
                                        [--queries 1000] [--k 10]
    python benchmarks/search_latency.py --backend elasticsearch --docs 100000 --model DIR

``--backend elasticsearch`` uses the cluster of QRES_ES_URL (QRES_ES_USER, QRES_ES_PASSWORD)
and a throw-away index ``qres-bench-<random>``, deleted at the end.

Builds a synthetic corpus (benchmarks/synthetic.py) in a temporary index, then times single
queries through the production SearchPipeline: BM25 top-k, and with a model also dense and
hybrid (BM25 top-100 and the 100 nearest questions rescored), ranked alone (ids and
scores, ``with_text=False``, as bm25s answers), and bm25 and hybrid again as ``qres search``
shows them (``*_shown``: the results' titles, tags and snippets read too). When the
``bm25s`` package is installed (the ``dev``
extra) the same corpus, tokenised by qres's own analyzer (:func:`qres.text.bm25_terms`), is
indexed by bm25s with tantivy's k1 = 1.2 and b = 0.75 in two ways, and every query is timed
on each engine in turn, so all see the same machine load; the ratios
(``qres_bm25_over_bm25s_p50``) are the figures to compare across loaded machines. Each mode
runs 50 warm-up queries first. With ``--links-forum DIR`` (a dump's folder, e.g. the travel
forum) the same run also indexes that forum with its duplicate links (and ``--model``'s
vectors) and times bm25, ranked alone, following the links and keeping duplicates as
themselves (``links.following_over_keeping_p50``), and hybrid the same way with a model
(``links.hybrid_following_over_keeping_p50``). Following links in bm25 mode lets the first
:data:`qres.ranking.duplicates.VOTERS` hits vote for their families, so the engine's own top
``VOTERS`` against its top k (``links.bm25_engine_voters_over_k_p50``, the backend's search
alone) is timed in the same loop: the least that following can cost over not following.

* ``bm25s`` — one field holding the title twice and the body: bm25s's fast path (one
  posting list per query term). It is a different ranking function from qres's, which sums
  a BM25 score per field (title x title boost + body, each field with its own document
  frequencies and average length: two posting lists per term), so their top-k overlap is
  low by design and says nothing about either being right.
* ``bm25s_fields`` — qres's function computed by bm25s: one bm25s index per field, every
  document's scores (``get_scores``) summed with the title boost, top k of that. Its top-k
  overlap with qres checks that qres ranks as BM25 says; it differs only where documents tie
  at the k-th score and where tantivy rounds field lengths above 40 terms (its one-byte
  field norms). It is how bm25s ranks as qres does, so it is timed too; it scores every
  document, so its time grows with the corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import SyntheticForum  # noqa: E402

from qres.backends import BACKENDS, BackendError, open_backend  # noqa: E402
from qres.indexing.pipeline import index_questions  # noqa: E402
from qres.paths import repo_shared_data  # noqa: E402
from qres.ranking import duplicates  # noqa: E402
from qres.ranking.search import SearchPipeline  # noqa: E402
from qres.text import bm25_terms  # noqa: E402


def machine() -> dict:
    return {
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def summary(times_ms: list[float]) -> dict:
    return {
        "p50_ms": round(float(np.percentile(times_ms, 50)), 3),
        "p99_ms": round(float(np.percentile(times_ms, 99)), 3),
        "mean_ms": round(float(np.mean(times_ms)), 3),
    }


def _bm25s_index(corpus: list[list[str]]):
    import bm25s

    model = bm25s.BM25(k1=1.2, b=0.75)
    model.index(corpus, show_progress=False)
    return model


class Bm25s:
    """bm25s over the same questions, qres's analyzer: title twice + body in one field
    (:meth:`search`), and with ``fields`` also one index per field (:meth:`search_fields`)."""

    def __init__(self, questions, analyzer: str | None, title_boost: float, fields: bool):
        import bm25s

        self.analyzer, self.title_boost = analyzer, title_boost
        self.ids = [q.id for q in questions]
        titles = [bm25_terms(q.title, analyzer) for q in questions]
        bodies = [bm25_terms(q.body, analyzer) for q in questions]
        self.model = _bm25s_index([2 * t + b for t, b in zip(titles, bodies, strict=True)])
        self.fields = [_bm25s_index(titles), _bm25s_index(bodies)] if fields else None
        self.version = bm25s.__version__

    def _terms(self, text: str) -> list[str]:
        return list(dict.fromkeys(bm25_terms(text, self.analyzer)))  # distinct, as qres does

    def search(self, text: str, k: int) -> list[str]:
        known = [t for t in self._terms(text) if t in self.model.vocab_dict]
        if not known:  # bm25s refuses a query with no indexed term
            return []
        rows, _ = self.model.retrieve([known], k=k, show_progress=False, n_threads=1)
        return [self.ids[i] for i in rows[0]]

    def search_fields(self, text: str, k: int) -> list[str]:
        terms = self._terms(text)
        scores = np.zeros(len(self.ids), dtype=np.float32)
        for model, boost in zip(self.fields, (self.title_boost, 1.0), strict=True):
            known = [t for t in terms if t in model.vocab_dict]
            if known:
                scores += boost * model.get_scores(known)
        top = np.argpartition(-scores, min(k, len(scores) - 1))[:k] if len(scores) > k else None
        rows = np.arange(len(scores)) if top is None else top
        rows = rows[scores[rows] > 0]
        return [self.ids[i] for i in rows[np.argsort(-scores[rows], kind="stable")]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=10, help="results per query")
    parser.add_argument("--model", type=Path, help="model dir: also time dense and hybrid")
    parser.add_argument("--no-bm25s", action="store_true", help="skip the bm25s comparison")
    parser.add_argument(
        "--no-bm25s-fields", action="store_true", help="skip bm25s with qres's two fields"
    )
    parser.add_argument("--data-dir", type=Path, default=repo_shared_data())
    parser.add_argument("--index-dir", type=Path, help="keep the index here (default: temp)")
    parser.add_argument("--backend", choices=BACKENDS, default="embedded")
    parser.add_argument(
        "--links-forum",
        type=Path,
        help="a dump's folder (Posts.xml, PostLinks.xml): also time bm25 following its links",
    )
    args = parser.parse_args()

    encoder = None
    if args.model:
        from qres.encoders.runtime import Encoder

        encoder = Encoder.load(args.model)
    forum = SyntheticForum(args.data_dir)
    workdir = args.index_dir or Path(tempfile.mkdtemp(prefix="qres-bench-"))
    index_name = f"qres-bench-{uuid.uuid4().hex[:8]}"
    backend = open_backend(args.backend, workdir / "index", create=True, index=index_name)
    try:
        result = run(args, backend, encoder, forum, workdir)
        if args.links_forum:
            result["links"] = following_links(args, encoder, workdir / "forum")
    finally:
        if args.backend == "elasticsearch":
            backend.drop()
        backend.close()
        if args.index_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))


def following_links(args, encoder, index_dir: Path) -> dict:
    """A forum with its duplicate links indexed (with ``encoder``'s vectors), its titles
    searched by bm25 ranked alone (``with_text=False``) following the links and keeping the
    duplicates as themselves, in turn."""
    from qres.corpus import duplicate_links
    from qres.corpus.readers import read_corpus

    posts = args.links_forum / "Posts.xml"
    links = duplicate_links.read(args.links_forum / "PostLinks.xml")
    backend = open_backend("embedded", index_dir, create=True)
    try:
        questions = duplicate_links.attach(read_corpus(posts), links)
        index_questions(backend, questions, encoder=encoder)
        following = SearchPipeline(backend, encoder)
        keeping = SearchPipeline(backend, encoder)
        keeping.follow_duplicates = False
        titles = [q.title for q in read_corpus(posts)][: args.queries]
        engines = {}
        for mode in ("bm25", "hybrid") if encoder is not None else ("bm25",):
            engines |= {
                f"{mode}_following_links": partial(following.search, k=args.k, mode=mode),
                f"{mode}_keeping_duplicates": partial(keeping.search, k=args.k, mode=mode),
            }
        engines = {name: partial(run, with_text=False) for name, run in engines.items()}
        # The floor of following: the voters are the engine's top VOTERS, not its top k.
        engines["bm25_engine_top_k"] = partial(backend.candidates, k=args.k)
        engines["bm25_engine_top_voters"] = partial(backend.candidates, k=duplicates.VOTERS)
        times = timed_in_turn(engines, titles)
    finally:
        backend.close()
    latency = {name: summary(t) for name, t in times.items()}
    ratios = {
        f"{mode}_following_over_keeping_p50": round(
            latency[f"{mode}_following_links"]["p50_ms"]
            / latency[f"{mode}_keeping_duplicates"]["p50_ms"],
            3,
        )
        for mode in ("bm25", "hybrid")
        if f"{mode}_following_links" in latency
    }
    ratios["bm25_engine_voters_over_k_p50"] = round(
        latency["bm25_engine_top_voters"]["p50_ms"] / latency["bm25_engine_top_k"]["p50_ms"], 3
    )
    return {
        "forum": str(args.links_forum),
        "questions_with_links": len(links),
        "follows_links": following.follow_duplicates,
        "queries": len(titles),
        "latency": latency,
        "following_over_keeping_p50": ratios["bm25_following_over_keeping_p50"],
        **ratios,
    }


def timed_in_turn(engines: dict, queries: list[str], warm_up: int = 50) -> dict[str, list[float]]:
    """Each query on every engine in turn, so all see the same load; the engine that goes
    first rotates, so none always pays for bringing the query's data into the CPU caches."""
    for run in engines.values():
        for text in queries[:warm_up]:
            run(text)
    times: dict[str, list[float]] = {name: [] for name in engines}
    names = list(engines)
    for i, text in enumerate(queries):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            engines[name](text)
            times[name].append((time.perf_counter() - start) * 1000)
    return times


def run(args, backend, encoder, forum, workdir: Path) -> dict:
    questions = list(forum.questions(args.docs))
    report = index_questions(backend, questions, encoder=encoder)
    index_bytes = sum(f.stat().st_size for f in (workdir / "index").rglob("*") if f.is_file())

    other = None
    if not args.no_bm25s:
        try:
            start = time.perf_counter()
            other = Bm25s(
                questions,
                getattr(backend, "analyzer", "english"),
                getattr(backend, "title_boost", 2.0),
                fields=not args.no_bm25s_fields,
            )
            other_index_s = time.perf_counter() - start
        except ImportError:
            print("bm25s not installed (pip install -e '.[bench]'): no comparison", file=sys.stderr)
    del questions

    pipeline = SearchPipeline(backend, encoder)
    queries = forum.query_texts(args.queries)
    modes = ["bm25"] + (["dense", "hybrid"] if encoder else [])
    # ranked alone (ids and scores), as bm25s answers; "_shown": what qres search shows, the
    # results' titles, tags and snippets read too
    engines = {
        mode: (lambda t, m=mode: pipeline.search(t, args.k, m, with_text=False)) for mode in modes
    }
    engines["bm25_shown"] = lambda t: pipeline.search(t, args.k, "bm25")
    if encoder:
        engines["hybrid_shown"] = lambda t: pipeline.search(t, args.k, "hybrid")
    if other is not None:
        engines["bm25s"] = lambda t: other.search(t, args.k)
        if other.fields:
            engines["bm25s_fields"] = lambda t: other.search_fields(t, args.k)
    times = timed_in_turn(engines, queries)
    latency = {name: summary(t) for name, t in times.items()}

    result = {
        "benchmark": "search_latency",
        "backend": args.backend,
        "machine": machine(),
        "corpus": {"questions": args.docs, "kind": "synthetic, SemEval word distribution"},
        "k": args.k,
        "candidates": pipeline.candidates,
        "queries": len(queries),
        "model": None if encoder is None else encoder.card.get("architecture", str(args.model)),
        "query_providers": None if encoder is None else encoder.query_providers,
        "indexing": {
            "seconds": round(report.seconds, 1),
            "docs_per_second": round(report.docs_per_second, 1),
            "with_encoding": encoder is not None,
            "index_mb": round(index_bytes / 2**20, 1) if args.backend == "embedded" else None,
        },
        "latency": latency,
    }
    if "hybrid" in latency:
        result["hybrid_over_bm25_p50"] = round(
            latency["hybrid"]["p50_ms"] / latency["bm25"]["p50_ms"], 2
        )
    if other is not None:
        overlap = {"bm25s": [], "bm25s_fields": []}
        for text in queries:
            mine = {r.id for r in pipeline.search(text, args.k, "bm25")}
            theirs = {"bm25s": set(other.search(text, args.k))}
            if other.fields:
                theirs["bm25s_fields"] = set(other.search_fields(text, args.k))
            for name, found in theirs.items():
                if mine or found:
                    overlap[name].append(len(mine & found) / max(len(mine), len(found)))
        result["bm25s"] = {
            "version": other.version,
            "index_seconds": round(other_index_s, 1),
            "corpus": "title x2 + body in one field, qres bm25_terms tokens, k1=1.2 b=0.75",
            f"top{args.k}_overlap_with_qres_bm25": round(float(np.mean(overlap["bm25s"])), 3),
        }
        if other.fields:
            result["bm25s_fields"] = {
                "corpus": "title and body indexed apart, scores summed with qres's title boost",
                f"top{args.k}_overlap_with_qres_bm25": round(
                    float(np.mean(overlap["bm25s_fields"])), 3
                ),
            }
        for stat in ("p50_ms", "p99_ms"):
            result[f"qres_bm25_over_bm25s_{stat[:3]}"] = round(
                latency["bm25"][stat] / latency["bm25s"][stat], 2
            )
    return result


if __name__ == "__main__":
    try:
        main()
    except BackendError as err:
        sys.exit(f"error: {err}")
