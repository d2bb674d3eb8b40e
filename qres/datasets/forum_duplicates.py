"""A StackExchange forum's own duplicate links as a labelled set: full-forum duplicate search.

A forum folder holds the dump's ``Posts.xml`` and ``PostLinks.xml`` (plain or ``.gz``). Every
question closed as a duplicate — the ``PostId`` of a ``LinkTypeId="3"`` link whose two
questions are both in ``Posts.xml`` — is a query; its relevant questions are every question
it is linked to that way (the CQADupStack/BEIR convention). The query searches the whole
forum, its own id left out (:mod:`qres.evaluation.runner`).

Splits, by time, fixed: a query's date is the ``CreationDate`` of its oldest duplicate link
(when it was first closed). Queries ordered by that date (then id) are cut at 80%: the oldest
80% are ``train`` (for training and tuning), the newest 20% ``test``; ``all`` is both. A query
whose later links fall after the cut stays in the split of its first link, with all its links
as its relevant set, so every query is in exactly one split and no test query's own links
are trained on. :func:`duplicate_pairs` gives the (duplicate, original) pairs of a split for
training.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from qres.corpus import duplicate_links
from qres.corpus.readers import CorpusError, Question, read_corpus
from qres.datasets.benchmarks import RankingQuery, default_data_dir

SPLITS = ("all", "train", "test")
TRAIN_SHARE = 0.8
# The newest train-split queries kept out of training: the GRU path chooses its epoch on
# them, and a transformer fine-tuned with --hold-out leaves them for fitting the fusion.
HELD_OUT_SHARE = 0.1
DEFAULT_FOLDER = "stackexchange-travel"


@dataclass
class ForumDuplicates:
    queries: list[RankingQuery]  # each with its question, no candidates: it searches the forum
    posts: Path  # Posts.xml: the whole forum, what the evaluation index holds
    links: Path
    cut_date: str  # the first closing date of the test split
    # Each duplicate's originals with the links' dates: what the evaluation index holds, so
    # that search finds an original through an older duplicate of it (qres.ranking.duplicates).
    known_links: duplicate_links.Links

    def corpus(self) -> Iterator[Question]:
        """Every question of the forum, a closed duplicate with its links."""
        return forum_corpus(self.posts, self.known_links)


def forum_corpus(posts: Path, links: duplicate_links.Links) -> Iterator[Question]:
    """The questions of ``posts``, each closed duplicate with its ``links`` in its extras."""
    return duplicate_links.attach(read_corpus(posts, "stackexchange"), links)


def forum_dir(data_dir: Path | None) -> Path:
    """``data_dir`` itself (the folder of Posts.xml), default ``stackexchange-travel`` of the
    shared data."""
    return data_dir if data_dir is not None else default_data_dir() / DEFAULT_FOLDER


def _find(folder: Path, name: str) -> Path:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise CorpusError(folder / name, None, "not found: give the folder that holds the dump")


def links_file(folder: Path) -> Path:
    """The dump's ``PostLinks.xml`` (or ``.gz``) in ``folder``."""
    return _find(folder, "PostLinks.xml")


def load_forum_duplicates(data_dir: Path | None, split: str = "all") -> ForumDuplicates:
    """The duplicate queries of ``split`` (one of :data:`SPLITS`), with their questions."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (one of {', '.join(SPLITS)})")
    folder = forum_dir(data_dir)
    posts, links = _find(folder, "Posts.xml"), _find(folder, "PostLinks.xml")
    known = duplicate_links.read(links, dated=True)  # query → its originals, links' dates
    closed = {post: (mine[0][1], {o for o, _ in mine}) for post, mine in known.items()}
    wanted = set(closed) | {o for _, originals in closed.values() for o in originals}
    questions = {q.id: q for q in forum_corpus(posts, known) if q.id in wanted}
    present = {
        post: (date, frozenset(o for o in originals if o in questions))
        for post, (date, originals) in closed.items()
        if post in questions
    }
    ordered = sorted(((d, p) for p, (d, o) in present.items() if o), key=_by_date_then_id)
    cut = int(round(TRAIN_SHARE * len(ordered)))
    chosen = {"all": ordered, "train": ordered[:cut], "test": ordered[cut:]}[split]
    queries = [
        RankingQuery(post, [], present[post][1], question=questions[post]) for _, post in chosen
    ]
    cut_date = ordered[cut][0] if cut < len(ordered) else ""
    return ForumDuplicates(queries, posts, links, cut_date, known)


def held_out_cut(n_train: int) -> int:
    """Where the newest :data:`HELD_OUT_SHARE` (at least one) of ``n_train`` train-split
    queries, in date order, begin."""
    return n_train - max(1, round(HELD_OUT_SHARE * n_train))


def _by_date_then_id(item: tuple[str, str]) -> tuple[str, int, str]:
    date, post = item
    return (date, int(post) if post.isdigit() else 0, post)


def duplicate_pairs(data_dir: Path | None, split: str = "train") -> list[tuple[str, str]]:
    """(duplicate, original) id pairs of the queries of ``split``, for training."""
    forum = load_forum_duplicates(data_dir, split)
    return [(q.id, original) for q in forum.queries for original in sorted(q.relevant)]
