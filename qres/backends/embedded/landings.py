"""Where each hit of a search leads, by vector slot, in one generation of an index.

A search that follows duplicate links (:mod:`qres.ranking.duplicates`) lets each of its
first hundred hits vote for the question it leads to: a question closed as a duplicate leads
to its originals, any other stands for itself. Worked out from the stored questions, that
costs a read of each hit's id, and a search by id for the originals, on every search; yet it
changes only when the index does. :class:`Landings` keeps it by vector slot (a slot's
document never changes) for as long as one tantivy searcher lives: the backend replaces both
together whenever it sees a commit (``Snapshot.reload``), since a commit that deletes or adds
an original changes where its duplicates lead. A hit's landing is worked out the first time
a search meets its slot, and from then on costs an array read. An index without vectors has
no slots: each document a search meets is given a number instead, by its tantivy address,
which holds for the searcher's life.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence

import numpy as np

from qres.backends.base import SEVERAL, Landed

UNKNOWN, UNSLOTTED = -1, -3  # a slot not met yet; one leading to a question without a slot
_NUMBERED = 200_000  # documents without a vector slot numbered per searcher, at most

Landing = tuple[tuple[int, str], ...] | None  # (slot, id) of each question it leads to


class Landings:
    """What searches of one generation learnt of where hits lead: by slot, the slot its
    hits lead to (an array, grown as larger slots are met), and the ids of those."""

    def __init__(self):
        self.to = np.full(0, UNKNOWN, np.int32)  # 4 MB at a million slots; only ever grows
        self._growing = threading.Lock()
        self.names: dict[int, str] = {}  # the id at each slot hits lead to from elsewhere
        self.several: dict[int, tuple[tuple[int, str], ...]] = {}  # by slot: where it leads
        self.slot_of: dict[str, int] = {}  # the slot of each question hits lead to, by id
        self._numbered: dict[tuple[int, int], int] = {}  # by (segment, document)
        self._counting = itertools.count()

    def of(self, slots: np.ndarray, resolve: Callable[[list[int]], list[Landing]]) -> Landed | None:
        """Where the hits with ``slots`` (in rank order) lead; None where one leads to a
        question without a vector slot. ``resolve(positions)`` works out the hits met for
        the first time: for each, () where it stands for itself, else its landing (None:
        one without a slot)."""
        try:
            to = self.to[slots]
        except IndexError:  # a slot past those met so far
            to = self._grown(int(slots.max()) + 1)[slots]
        several = []
        if len(to) and to.min() < 0:  # (most searches: none unknown, none to several)
            unknown = np.flatnonzero(to == UNKNOWN).tolist()
            if unknown:  # (``to`` is this search's copy: another thread may grow the array)
                to[unknown] = self._learn(slots[unknown].tolist(), resolve(unknown))
            if (to == UNSLOTTED).any():
                return None
            several = np.flatnonzero(to == SEVERAL).tolist()
        return Landed(slots, to, self.names, {at: self.several[int(slots[at])] for at in several})

    def numbers(self, addresses) -> np.ndarray | None:
        """A number for each document at ``addresses`` (tantivy's, of this generation's
        searcher), the same each time it is met: what a vector slot is in an index with
        vectors. None once the searcher numbered :data:`_NUMBERED` (a search then reads
        each hit's id, as before)."""
        numbered, numbers = self._numbered, []
        for address in addresses:
            at = (address.segment_ord, address.doc)
            number = numbered.get(at)
            if number is None:
                if len(numbered) >= _NUMBERED:
                    return None
                number = numbered.setdefault(at, next(self._counting))  # one per document
            numbers.append(number)
        return np.array(numbers, np.int64)

    def _grown(self, needed: int) -> np.ndarray:
        """The array, grown to hold ``needed`` slots; searches at once grow it one at a
        time (what another writes into the old one meanwhile is learnt again later)."""
        with self._growing:
            current = self.to
            if len(current) < needed:
                grown = np.full(max(2 * len(current), needed, 1024), UNKNOWN, np.int32)
                grown[: len(current)] = current
                self.to = current = grown
            return current

    def _learn(self, slots: Sequence[int], landings: Sequence[Landing]) -> list[int]:
        """Keep where the hits at ``slots`` lead; returns the slot each leads to (or
        SEVERAL, UNSLOTTED)."""
        learnt = []
        for slot, landing in zip(slots, landings, strict=True):
            if landing is None:
                learnt.append(UNSLOTTED)
            elif not landing:
                learnt.append(slot)
            else:
                self.names.update(landing)  # before the slot says where to look
                self.slot_of.update((qid, at) for at, qid in landing)
                if len(landing) > 1:
                    self.several[slot] = landing
                learnt.append(landing[0][0] if len(landing) == 1 else SEVERAL)
        self.to[slots] = learnt
        return learnt


def landing(qid: str, lands_on: Sequence[str], slot_of: dict[str, int | None]) -> Landing:
    """The landing of the hit on ``qid``, which ``lands_on`` names by id (``slot_of``: the
    slots of the questions read on the way)."""
    if list(lands_on) == [qid]:
        return ()
    if all(slot_of.get(o) is not None for o in lands_on):
        return tuple((slot_of[o], o) for o in lands_on)
    return None
