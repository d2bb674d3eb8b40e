"""A search that finds a question closed as a duplicate shows its original in its place.

A forum closes a question as a duplicate because another one already has the answers
(:mod:`qres.corpus.duplicate_links` keeps that in the duplicate's extras). So when a search
ranks a closed duplicate, what it shows at that rank is the original, the way StackExchange
sends a visitor of a closed question on to it:

* the original takes the duplicate's place and scores (raised by its family's vote, below),
  and names it in ``Result.via``; a duplicate of several originals gives way to each, in
  link order;
* an original that is itself closed as a duplicate leads on to its own original (cycles are
  cut), and an original already shown higher up is not shown twice: the duplicate is dropped;
* a duplicate whose originals the index does not hold stays, as itself.

``before`` (a ``CreationDate`` of the dump, compared as text) follows only the links made
before then: evaluation replays each query at the time it was asked, so that it never sees
its own link or a later one (:mod:`qres.evaluation.rankers`).

A forum's duplicates of one question are its family, and the family votes: of the first
:data:`VOTERS` hits, each one counts for the question it leads to, which ranks by its best
hit's score plus :data:`VOTE` times how far each other hit of its family scored above the
lowest of those hits. An original that several of its duplicates match ranks above one
question that matches a little better alone; the lowest hit is the zero, so any scale of
score (BM25's, a fused one) votes alike, and a hit barely in the list adds next to nothing.
Measured on the travel forum's train split (a title as the query, MiniLM), the family vote
took nDCG@10 with the links followed from 51.16 to 60.75 (``benchmarks/family_vote.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from qres.backends.base import SEVERAL
from qres.corpus.readers import Question
from qres.corpus.stackexchange import DUPLICATE_DATES, DUPLICATE_OF

VOTERS = 100  # the hits whose families vote (a search's BM25 candidates, DEFAULT_CANDIDATES)
VOTE = 0.5  # the say of each further hit of a family (chosen on the travel forum's train split)


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
    replaced by its originals, the first :data:`VOTERS` ranked by their families' votes;
    also every question read on the way, by id (what the results show is among them). The
    hits that ``not_closed`` names are not read (nothing leads on from them). A ranking with
    ``head(n)`` (a search's: its first ``n`` ids and scores) votes without making a result of
    each voter."""
    stored: dict[str, Question] = {}
    ids, scores = _head(ranked, VOTERS)
    landings = _landings(ids, stored, fetch, before, not_closed)
    families: dict[str, list[int]] = {}  # positions of its hits; in the order of its best
    for at, qid in enumerate(ids):
        for landed in landings[qid]:
            families.setdefault(landed, []).append(at)
    best, voted = _vote(families, scores, k)
    hits = _results(ranked, [families[qid][0] for qid in best])
    shown = [_shown(hit, qid, voted[qid]) for hit, qid in zip(hits, best, strict=True)]
    # Past the voters (a top k deeper than their families), in rank order.
    start = len(ids)
    while len(shown) < k and start < len(ranked):
        chunk = ranked[start : start + k - len(shown)]
        start += len(chunk)
        landings = _landings([r.id for r in chunk], stored, fetch, before, not_closed)
        for r in chunk:
            for qid in landings[r.id]:
                if qid not in families and len(shown) < k:
                    families[qid] = []
                    shown.append(_shown(r, qid, r.score))
    return shown, stored


def follow_by_slot(ranked, found, k: int) -> list | None:
    """:func:`follow`'s results, every link followed, where the candidates ranked tell where
    each hit leads by vector slot (:meth:`~qres.backends.base.Candidates.landing_slots`):
    the families vote by slot, and only the ``k`` results shown read their ids (on a search
    met before, nothing else is read). None where the candidates cannot tell, or where the
    voters make fewer than ``k`` families and the ranking goes deeper."""
    rows, scores = ranked.head_rows(VOTERS)
    landed = found.landing_slots(rows, _lead) if len(rows) else None
    if landed is None:
        return None
    families: dict[int, list[int]] = {}  # positions of its hits; in the order of its best
    for at, slot in enumerate(landed.to.tolist()):
        if slot == SEVERAL:
            for each, _ in landed.several[at]:
                families.setdefault(each, []).append(at)
        elif slot in families:
            families[slot].append(at)
        else:
            families[slot] = [at]
    if len(families) < k and len(ranked) > len(landed.to):
        return None
    best, voted = _vote(families, scores.tolist(), k)
    heads = [families[slot][0] for slot in best]
    hits = _results(ranked, heads)
    slots, names = landed.slots, landed.names
    return [
        _shown(hit, hit.id if slot == slots[at] else names[slot], voted[slot])
        for hit, slot, at in zip(hits, best, heads, strict=True)
    ]


def _vote(families: dict, scores: list[float], k: int) -> tuple[list, dict]:
    """The ``k`` families (positions of their hits, by what they lead to) with the best
    votes, ties in the order met, and each family's vote."""
    floor = min(scores, default=0.0)
    voted = {
        family: scores[at[0]] + VOTE * sum(scores[a] - floor for a in at[1:])
        if len(at) > 1
        else scores[at[0]]
        for family, at in families.items()
    }
    return sorted(families, key=voted.__getitem__, reverse=True)[:k], voted


def _lead(ids: Sequence[str], fetch) -> dict[str, list[str]]:
    """Where the hits on ``ids`` lead by id, every link followed (``fetch``: reads stored
    questions by id)."""
    return _landings(ids, {}, fetch, None, lambda ids: set())


def _head(ranked: Sequence, n: int) -> tuple[list[str], list[float]]:
    """The ids and scores of the first ``n`` of ``ranked`` (a search's ranking reads them
    without making a result of each)."""
    if hasattr(ranked, "head"):
        return ranked.head(n)
    return [r.id for r in ranked[:n]], [r.score for r in ranked[:n]]


def _results(ranked: Sequence, positions: list[int]) -> list:
    """The results at ``positions`` of ``ranked`` (a search's ranking makes them at once)."""
    if hasattr(ranked, "results"):
        return ranked.results(positions)
    return [ranked[p] for p in positions]


def _shown(hit, qid: str, score: float):
    """``hit`` as the result for ``qid``, which it put there, with its family's score."""
    if qid == hit.id:
        return hit if score == hit.score else replace(hit, score=score)
    return replace(hit, id=qid, via=hit.id, score=score)


def _landings(ids: Sequence[str], stored: dict, fetch, before, not_closed) -> dict:
    """Where each hit of ``ids`` leads (:func:`_landing`), by id; the hits that may be
    closed, and the originals they name, read together (not one read per hit) into
    ``stored``."""
    plain = not_closed(ids)
    unread = [qid for qid in ids if qid not in plain and qid not in stored]
    stored.update(fetch(unread) if unread else {})
    leads = {qid: originals(stored[qid].extras, before) for qid in ids if qid in stored}
    named = {o for ahead in leads.values() for o in ahead}
    unread = sorted(named - stored.keys())
    stored.update(fetch(unread) if unread else {})
    for o in named - leads.keys():
        leads[o] = originals(stored[o].extras, before) if o in stored else []
    landings = {}
    for qid in ids:
        ahead = leads.get(qid)
        if not ahead:  # most hits lead nowhere: they stand for themselves
            landings[qid] = [qid]
        elif all(o in stored and not leads[o] and o != qid for o in ahead):  # one step
            landings[qid] = list(dict.fromkeys(ahead))
        else:
            landings[qid] = _landing(qid, stored, fetch, before, leads)
    return landings


def _landing(qid: str, stored: dict, fetch, before, leads: dict) -> list[str]:
    """Where a hit on ``qid`` leads: the originals it duplicates (transitively, cycles cut)
    that the index holds, or itself where it is not a duplicate of any it holds. ``leads``
    holds each question's originals as far as known, and learns more."""
    landed, path, todo = [], set(), [qid]
    while todo:
        current = todo.pop(0)
        if current in path:
            continue
        path.add(current)
        if current not in leads:
            question = stored.get(current)
            leads[current] = originals(question.extras, before) if question is not None else []
        ahead = [o for o in leads[current] if o not in path]
        missing = [o for o in ahead if o not in stored]
        if missing:
            stored.update(fetch(missing))
        ahead = [o for o in ahead if o in stored]
        if ahead:
            todo = ahead + todo  # the duplicate itself is not shown
        elif current not in landed:
            landed.append(current)
    return landed
