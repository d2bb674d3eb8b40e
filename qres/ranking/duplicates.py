"""A search that finds a question closed as a duplicate shows its original in its place.

A forum closes a question as a duplicate because another one already has the answers
(:mod:`qres.corpus.duplicate_links` keeps that in the duplicate's extras). So when a search
ranks a closed duplicate, what it shows at that rank is the original, the way StackExchange
sends a visitor of a closed question on to it:

* the original takes the duplicate's rank and scores, and names it in ``Result.via``; a
  duplicate of several originals gives way to each, in link order;
* an original that is itself closed as a duplicate leads on to its own original (cycles are
  cut), and an original already shown higher up is not shown twice: the duplicate is dropped;
* a duplicate whose originals the index does not hold stays, as itself.

``before`` (a ``CreationDate`` of the dump, compared as text) follows only the links made
before then: evaluation replays each query at the time it was asked, so that it never sees
its own link or a later one (:mod:`qres.evaluation.rankers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from qres.corpus.readers import Question
from qres.corpus.stackexchange import DUPLICATE_DATES, DUPLICATE_OF


def first_closed(extras: Mapping) -> str | None:
    """When the question of ``extras`` was first closed as a duplicate (None: never, or not
    known)."""
    dates = [d for d in str(extras.get(DUPLICATE_DATES) or "").split() if d != "-"]
    return min(dates) if dates else None


def originals(extras: Mapping, before: str | None = None) -> list[str]:
    """The questions ``extras`` says its question was closed as a duplicate of (only links
    made before ``before``, where the link's date is known)."""
    ids = str(extras.get(DUPLICATE_OF) or "").split()
    if before is None:
        return ids
    dates = str(extras.get(DUPLICATE_DATES) or "").split()
    dates = (dates + ["-"] * len(ids))[: len(ids)]  # "-", or missing: undated, always followed
    return [o for o, date in zip(ids, dates, strict=True) if date == "-" or date < before]


def follow(
    ranked: Sequence,
    fetch: Callable[[Sequence[str]], dict[str, Question]],
    k: int,
    before: str | None = None,
    not_closed: Callable[[Sequence[str]], set[str]] = lambda ids: set(),
) -> tuple[list, dict[str, Question]]:
    """The first ``k`` of ``ranked`` (results best first) with each closed duplicate
    replaced by its originals; also every question read on the way, by id (what the results
    show is among them). ``ranked`` is read ``k`` first, then as many more as are still
    missing, as far as needed; the hits that ``not_closed`` names are not read (nothing
    leads on from them)."""
    stored: dict[str, Question] = {}
    shown: list = []
    seen: set[str] = set()
    start, size = 0, k
    while start < len(ranked):
        chunk = ranked[start : start + size]
        start += size
        ids = [r.id for r in chunk]
        plain = not_closed(ids)
        unread = [qid for qid in ids if qid not in plain and qid not in stored]
        stored.update(fetch(unread) if unread else {})
        # the hits that lead on, and the originals they name, read together (not one read
        # per hit)
        leading = {
            qid: leads
            for qid in ids
            if qid in stored and (leads := originals(stored[qid].extras, before))
        }
        named = {o for leads in leading.values() for o in leads} - stored.keys()
        stored.update(fetch(sorted(named)) if named else {})
        for r in chunk:
            if r.id in leading:
                landed = _landing(r.id, stored, fetch, before, seen)
            elif r.id in seen:  # most hits lead nowhere: shown as themselves, once
                continue
            else:
                seen.add(r.id)
                landed = (r.id,)
            for qid in landed:
                shown.append(r if qid == r.id else replace(r, id=qid, via=r.id))
                if len(shown) == k:
                    return shown, stored
        size = k - len(shown)  # as many more as are missing (one read each round)
    return shown, stored


def _landing(qid: str, stored: dict, fetch, before, seen: set[str]) -> list[str]:
    """Where a hit on ``qid``, a closed duplicate, leads: the originals it duplicates
    (transitively) that the index holds, or itself where it holds none; none already
    ``seen``, and all of them seen from now on."""
    landed, path, todo = [], set(), [qid]
    while todo:
        current = todo.pop(0)
        if current in seen:
            continue
        path.add(current)
        question = stored.get(current)
        leads = originals(question.extras, before) if question is not None else []
        leads = [o for o in leads if o not in path]
        missing = [o for o in leads if o not in stored]
        if missing:
            stored.update(fetch(missing))
        leads = [o for o in leads if o in stored]
        if leads:
            todo = leads + todo  # the duplicate itself is not shown
        else:
            seen.add(current)
            landed.append(current)
    seen.update(path)
    return landed
