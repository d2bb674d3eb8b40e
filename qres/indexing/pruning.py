"""Questions a forum deleted: ``qres index FILE --prune`` (``Index.add(FILE, prune=True)``)
deletes those the index holds that FILE, read whole, no longer does, so that an index kept up
to date from each new dump of a forum stops suggesting questions the forum removed, without
the hours a ``--rebuild`` spends encoding a large forum again.

Only what a run read whole prunes: a run stopped by an error or Ctrl-C deletes nothing, nor
does one that skipped malformed records (a skipped record's question cannot be told from a
deleted one), nor one whose deletions would take more than :data:`MOST_PRUNED` of the index
(a cut-short file, not a forum's deletions: ``--rebuild`` replaces the index then)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from qres.backends.base import Backend, BackendError
from qres.corpus.readers import Question
from qres.indexing.sources import corpora, shown, source
from qres.workers import signals_deferred

MOST_PRUNED = 0.5  # of the questions held: more is refused


def check_prunable(backend: Backend, corpus: str | Path) -> None:
    """Refuse, before anything is written, to prune an index that holds questions of other
    corpus files too: ``corpus`` cannot say which of theirs were deleted."""
    others = [c for c in corpora(backend) if c != source(corpus)]
    if others and backend.count() > 0:
        raise BackendError(
            f"--prune: this index holds the questions of {shown(others[0])} too, which "
            f"{shown(source(corpus))} cannot say were deleted; nothing was indexed"
        )


def noting_ids(questions: Iterable[Question], read: set[str]) -> Iterator[Question]:
    """``questions``, each one's id added to ``read`` as it goes by."""
    for question in questions:
        read.add(question.id)
        yield question


def prune(
    backend: Backend, read: set[str], corpus: str | Path, skipped: int = 0, done: list | None = None
) -> int:
    """Delete and commit the questions held that ``read`` (the ids of all of ``corpus``) does
    not name; how many (appended to ``done`` too, so that a Ctrl-C or SIGTERM held back until
    the commit is done can say so). Refused (:class:`BackendError`, nothing deleted) after
    ``skipped`` malformed records, or beyond :data:`MOST_PRUNED` of the index."""
    name = shown(source(corpus))
    if skipped:
        raise BackendError(
            f"--prune: {skipped:,} malformed record{'s were' if skipped > 1 else ' was'} skipped, "
            f"and a question in one cannot be told from one {name} no longer holds: nothing "
            "was pruned (the questions read are indexed)"
        )
    gone, held = backend.ids_not_in(read), backend.count()
    if len(gone) > MOST_PRUNED * held:
        raise BackendError(
            f"--prune would delete {len(gone):,} of the {held:,} questions held "
            f"({len(gone) / held:.0%}): is {name} whole? Nothing was pruned (the questions "
            "read are indexed); --rebuild makes the index hold exactly the file's questions"
        )
    with signals_deferred():  # deleted and committed whole, or not at all
        if gone:
            backend.delete(gone)
            backend.commit()
        if done is not None:
            done.append(len(gone))
    return len(gone)
