"""Real questions of four StackExchange sites, and forums of any size grown from them, written
as a StackExchange dump (``Posts.xml`` with ``PostLinks.xml`` beside it) for ``qres index``.

    python benchmarks/real_text.py --out DIR [--questions 1000000] [--seed 0] [--workers N]

The seed is ``../shared/data/stackexchange-kaggle-tags`` (its README): 41,803 real questions
of biology, cooking, crypto and robotics, HTML bodies with code and formulas. The first
41,803 questions written are those, as published (their HTML bodies, tags); each further one
is a *variant* of seed question ``i mod 41,803``: its title and body text with every word
replaced, with probability ``--vary`` (default 0.3), by a word drawn from the seed's own word
frequencies (so common words mostly), the body's paragraphs kept as ``<p>`` blocks. Variants
keep their seed's tags. Ids are 1, 2, ... in the order written. Each block of 10,000
questions draws from its own random stream (seeded by ``--seed`` and the block), so blocks are
drawn in ``--workers`` processes side by side and the dump is the same for any number of them
(dumps written before 2026-11-27 drew from one stream: the same recipe, other draws).

``PostLinks.xml`` holds, as a StackExchange dump does, links of two kinds: ``--duplicates``
(default 0.04, StackOverflow's share) of the variants closed as duplicates of their seed
(``LinkTypeId`` 3), and ``--linked`` (default 0.2) "linked" rows per question (type 1,
which qres skips) between random questions. Dates are made up, increasing with the id.

So a grown forum has real words, lengths, HTML and code, but its questions come in families of
near-copies (one per 41,803), which a real forum of that size does not: the text costs of
indexing are real, nearest-neighbour structure is denser than real (say so beside figures).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import html
import io
import json
import multiprocessing
import re
import sys
import time
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from qres.corpus.readers import Question
from qres.corpus.stackexchange import html_to_text
from qres.paths import repo_shared_data

SITES = ("biology", "cooking", "crypto", "robotics")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*")


def kaggle_dir(data_dir: Path | None = None) -> Path:
    folder = (data_dir or repo_shared_data()) / "stackexchange-kaggle-tags"
    if not folder.is_dir():
        raise SystemExit(f"{folder} is missing: the seed of the real-text corpora")
    return folder


def kaggle_rows(data_dir: Path | None = None) -> Iterator[tuple[str, str, str, str]]:
    """(site, title, HTML body, space-separated tags) of every seed question, site by site."""
    folder = kaggle_dir(data_dir)
    for site in SITES:
        with (
            zipfile.ZipFile(folder / f"{site}.csv.zip") as archive,
            archive.open(f"{site}.csv") as f,
        ):
            for row in csv.DictReader(io.TextIOWrapper(f, "utf-8")):
                yield site, row["title"], row["content"], row["tags"]


def kaggle_questions(data_dir: Path | None = None) -> list[Question]:
    """The seed questions as qres reads them from a dump (body as text), ids ``site-N``."""
    counts: Counter = Counter()
    out = []
    for site, title, body, tags in kaggle_rows(data_dir):
        counts[site] += 1
        qid = f"{site}-{counts[site]}"
        out.append(Question(qid, title, html_to_text(body), tuple(tags.split())))
    return out


class GrownForum:
    """The seed questions, then variants of them with words varied (see the module)."""

    def __init__(self, data_dir: Path | None = None, vary: float = 0.3):
        self.rows = list(kaggle_rows(data_dir))
        self.texts = [html_to_text(body) for _, _, body, _ in self.rows]
        words = Counter(w for text in self.texts for w in _WORD.findall(text))
        self.vocab = list(words)  # a list: a numpy array would pad every word to the longest
        counts = np.array(list(words.values()), dtype=float)
        self.cumulative = np.cumsum(counts / counts.sum())
        self.vary = vary

    def _varied(self, text: str, rng: np.random.Generator) -> str:
        parts = _WORD.split(text)
        words = _WORD.findall(text)
        if not words:
            return text
        change = rng.random(len(words)) < self.vary
        drawn = np.searchsorted(self.cumulative, rng.random(int(change.sum())))
        drawn = iter([self.vocab[i] for i in np.minimum(drawn, len(self.vocab) - 1)])
        words = [next(drawn) if c else w for w, c in zip(words, change, strict=True)]
        out = [parts[0]]
        for word, rest in zip(words, parts[1:], strict=True):
            out += [word, rest]
        return "".join(out)

    def posts(
        self, positions: range, rng: np.random.Generator
    ) -> Iterator[tuple[int, int, str, str, str]]:
        """(id, seed index, title, HTML body, tags) of the questions at ``positions`` (0 is
        the first), their words drawn from ``rng``."""
        seeds = len(self.rows)
        for i in positions:
            s = i % seeds
            _, title, body, tags = self.rows[s]
            if i >= seeds:
                title = self._varied(title, rng)
                paragraphs = self._varied(self.texts[s], rng).split("\n\n")
                body = "".join(f"<p>{html.escape(p)}</p>\n" for p in paragraphs if p.strip())
            yield i + 1, s, title, body, tags


def _date(i: int) -> str:
    seconds = 1_300_000_000 + 150 * i  # one question every 2.5 minutes from 2011
    return time.strftime("%Y-%m-%dT%H:%M:%S.000", time.gmtime(seconds))


BLOCK = 10_000  # questions drawn from one random stream: the dump is the same for any --workers
_forum: GrownForum | None = None  # what a worker process draws from (inherited by fork)


def _block(job: tuple[int, int, int, float, float]) -> tuple[str, list[tuple[int, int, int]]]:
    """Questions ``[start, stop)`` (ids ``start + 1`` …) as ``Posts.xml`` rows, and their
    links as (post, related post, link type), from their block's own random stream."""
    start, stop, seed, duplicates, linked = job
    forum, seeds = _forum, len(_forum.rows)
    rng = np.random.default_rng([seed, start // BLOCK])
    rows, links = [], []
    for qid, s, title, body, tags in forum.posts(range(start, stop), rng):
        tag_text = "".join(f"<{t}>" for t in tags.split())
        rows.append(
            f'  <row Id="{qid}" PostTypeId="1" CreationDate="{_date(qid)}" '
            f'Score="{int(rng.integers(-2, 40))}" AnswerCount="{int(rng.integers(0, 6))}" '
            f"Title={_attr(title)} Body={_attr(body)} Tags={_attr(tag_text)} />\n"
        )
        if qid > seeds and rng.random() < duplicates:
            links.append((qid, s + 1, 3))
        for _ in range(rng.poisson(linked)):
            links.append((qid, int(rng.integers(1, max(qid, 2))), 1))
    return "".join(rows), links


def write_dump(
    out: Path, n: int, seed: int = 0, vary: float = 0.3, duplicates: float = 0.04,
    linked: float = 0.2, data_dir: Path | None = None, workers: int = 1,
) -> dict:  # fmt: skip
    """Write ``out/Posts.xml`` and ``out/PostLinks.xml``; returns what was written. Blocks of
    :data:`BLOCK` questions are drawn in ``workers`` processes and written in order."""
    global _forum
    _forum = GrownForum(data_dir, vary)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    links = duplicate_links = 0
    jobs = [(a, min(a + BLOCK, n), seed, duplicates, linked) for a in range(0, n, BLOCK)]
    with contextlib.ExitStack() as stack:
        posts = stack.enter_context(open(out / "Posts.xml", "w", encoding="utf-8"))
        post_links = stack.enter_context(open(out / "PostLinks.xml", "w", encoding="utf-8"))
        blocks: Iterator = map(_block, jobs)
        if workers > 1:  # fork: the workers share the seed questions already read
            pool = stack.enter_context(multiprocessing.get_context("fork").Pool(workers))
            blocks = pool.imap(_block, jobs)
        posts.write('<?xml version="1.0" encoding="utf-8"?>\n<posts>\n')
        post_links.write('<?xml version="1.0" encoding="utf-8"?>\n<postlinks>\n')
        for rows, block_links in blocks:
            posts.write(rows)
            for post, related, kind in block_links:
                links += 1
                duplicate_links += kind == 3
                post_links.write(_link(links, post, related, kind, post))
        posts.write("</posts>\n")
        post_links.write("</postlinks>\n")
    return {
        "questions": n,
        "seed_questions": len(_forum.rows),
        "vary": vary,
        "links": links,
        "duplicate_links": duplicate_links,
        "posts_mb": round((out / "Posts.xml").stat().st_size / 2**20, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "workers": workers,
    }


def _attr(value: str) -> str:
    return '"' + html.escape(value, quote=True).replace("\n", "&#xA;") + '"'


def _link(link_id: int, post: int, related: int, kind: int, when: int) -> str:
    return (
        f'  <row Id="{link_id}" CreationDate="{_date(when + 3)}" PostId="{post}" '
        f'RelatedPostId="{related}" LinkTypeId="{kind}" />\n'
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the dump's files")
    parser.add_argument("--questions", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vary", type=float, default=0.3, help="share of words replaced")
    parser.add_argument("--duplicates", type=float, default=0.04)
    parser.add_argument("--linked", type=float, default=0.2)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--workers", type=int, default=1, help="processes drawing blocks")
    args = parser.parse_args(argv)
    written = write_dump(
        args.out, args.questions, args.seed, args.vary, args.duplicates, args.linked,
        args.data_dir, args.workers,
    )  # fmt: skip
    print(json.dumps({"benchmark": "real_text", "out": str(args.out), **written}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
