"""The candidates of a search of the embedded backend, read lazily from one tantivy searcher.

A search ranks a hundred hits or more but shows ten: each hit's vector slot comes from the
``slot`` fast field, and only the ids and stored questions of the rows a ranking keeps are
read from the document store. What a read learns is kept in the index's
:class:`~qres.backends.embedded.snapshot.Snapshot` by slot (a slot's document never
changes): the id at each slot, the stored questions shown, and where each hit leads when
duplicate links are followed (:class:`~qres.backends.embedded.landings.Landings`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import numpy as np
import tantivy

from qres.backends.base import Candidates
from qres.backends.embedded.documents import id_query, question_of
from qres.backends.embedded.landings import Landing, Landings, landing
from qres.backends.embedded.snapshot import Snapshot
from qres.corpus.readers import Question

_STORED_KEPT = 8192  # stored questions kept per index snapshot, by vector slot (~10 MB)


class TantivyCandidates(Candidates):
    """Hits of one tantivy searcher: vector slots come from the ``slot`` fast field, so only
    the ids of the rows asked for are read from the document store (and, in an index with
    vectors, only those no ANN file names and no earlier read found)."""

    def __init__(
        self,
        backend,  # the EmbeddedBackend that searched
        snapshot: Snapshot,
        searcher,
        hits: list,
        query_vector=None,
        landings: Landings | None = None,
    ):
        self._searcher = searcher
        self._landings = landings  # what searches learnt of where this searcher's hits lead
        self._addresses = [address for _, address in hits]
        self._slots: list[int] = []
        self._slot_array: np.ndarray | None = None  # the same, once landing_slots asks
        self._snapshot = snapshot
        self._backend = backend  # its ANN file names rows: read when an id is not known
        self._row_of: dict[str, int] = {}  # the rows whose ids were asked for, by id
        self._read: dict[int, tantivy.Document] = {}  # documents read for their ids, by row
        self._closed: list[bool | None] | None = None  # each row's closed mark, once asked
        self.scores = np.array([score for score, _ in hits], dtype=np.float64)
        self.cosine = self.has_vector = self.cosines = None
        self._has_ann = backend._dim(0) is not None  # an index with vectors may have one
        # a slot names one document until the index is reopened; a number, within a searcher
        self.slot_space = snapshot if self._has_ann else landings
        if hits and (query_vector is not None or self._has_ann):
            self._read_slots()
        if query_vector is not None:
            self._add_cosines(query_vector)

    def _read_slots(self) -> None:
        slots = self._searcher.fast_field_values("slot", self._addresses)
        self._slots = [-1 if s is None else s for s in slots]

    def _add_cosines(self, query_vector) -> None:
        backend = self._backend
        queries = query_vector if isinstance(query_vector, dict) else {None: query_vector}
        models = {fp: 0 if fp is None else backend._model_number(fp) for fp in queries}
        slots = self._slots
        self.cosines, self.has_vector = {}, np.ones(len(slots), bool)
        for fp, vector in queries.items():
            vectors, has = backend._vectors_at(slots, models[fp], self._snapshot)
            self.cosines[fp] = vectors @ vector  # both sides are L2-normalised
            self.has_vector &= has
        self.cosine = next(iter(self.cosines.values()))

    def rescored(self, query_vector):
        backend = self._backend

        def read():
            if backend._snapshot is not self._snapshot:  # swapped since: search again
                return None
            again = copy.copy(self)
            again._row_of, again._read = dict(self._row_of), dict(self._read)
            if self._addresses and not self._slots:
                again._read_slots()
            again._add_cosines(query_vector)
            return again

        return backend._consistent(read)

    def ids(self, rows: Sequence[int]) -> list[str]:
        # A row's id as already read or as the ANN file names it (a slot keeps its question
        # until a rebuild, which starts a new snapshot), else from the document store.
        rows = list(rows)
        slots = [self._slots[row] for row in rows] if self._slots else [-1] * len(rows)
        known = self._snapshot.id_at_slot
        ids = [known.get(slot) for slot in slots]
        ann = self._backend._ann_file(0, self._snapshot) if self._has_ann and None in ids else None
        if ann is not None:
            ids = [qid or other for qid, other in zip(ids, ann.ids_at(slots), strict=True)]
        for i, qid in enumerate(ids):
            if qid is None:
                row, slot = rows[i], slots[i]
                self._read[row] = self._searcher.doc(self._addresses[row])
                ids[i] = self._read[row]["id"][0]
                if slot >= 0:  # kept: the rows no ANN file names are few, or the index small
                    known[slot] = ids[i]
        self._row_of.update(zip(ids, rows, strict=True))
        return ids

    def not_closed(self, ids):
        if not self._snapshot.marks_closed or not self._addresses:
            return set()
        row_of, closed = self._row_of, self._closed_marks()
        return {qid for qid in ids if qid in row_of and closed[row_of[qid]] is False}

    def _closed_marks(self) -> list[bool | None]:
        if self._closed is None:  # every hit's mark in one read (None: a document without)
            self._closed = self._searcher.fast_field_values("closed", self._addresses)
        return self._closed

    def landing_slots(self, rows, lead):
        # Known by slot once a search of this searcher met it; else worked out from the
        # stored questions (those of hits not closed never read), and kept.
        if self._landings is None or not self._snapshot.marks_closed or not self._addresses:
            return None
        rows = np.asarray(rows, np.int64)
        slots = self._slots_at(rows)
        if slots is None:
            return None
        return self._landings.of(slots, lambda at: self._leads(rows[at].tolist(), lead))

    def _slots_at(self, rows: np.ndarray) -> np.ndarray | None:
        """What stands for the document of each of ``rows`` in :class:`Landings`: its vector
        slot, or in an index without vectors the number Landings gives it; None where one
        has none."""
        if not self._slots:  # no vectors
            return self._landings.numbers([self._addresses[row] for row in rows.tolist()])
        if self._slot_array is None:
            self._slot_array = np.array(self._slots, np.int64)
        slots = self._slot_array[rows]
        return None if len(slots) and int(slots.min()) < 0 else slots

    def _slot_of(self, slot: int | None, address) -> int | None:
        """:meth:`_slots_at` for one document, given its vector slot and address."""
        if not self._slots:
            numbers = self._landings.numbers([address])
            return None if numbers is None else int(numbers[0])
        return slot if slot is not None and slot >= 0 else None

    def _slot_of_row(self, row: int) -> int | None:
        return self._slot_of(self._slots[row] if self._slots else None, self._addresses[row])

    def _leads(self, rows: list[int], lead) -> list[Landing]:
        """The landing of each hit at ``rows``, worked out by ``lead`` from the stored
        questions."""
        ids, marks = self.ids(rows), self._closed_marks()
        slot_of = {qid: self._slot_of_row(row) for qid, row in zip(ids, rows, strict=True)}

        def fetch(wanted):  # the hits' questions where the search found them, others by id
            held = self.stored([q for q in wanted if q in self._row_of], fetch=dict)
            slot_of.update((q, self._slot_of_row(self._row_of[q])) for q in held)
            rest = [q for q in wanted if q not in held]
            if not rest:
                return held
            return held | fetch_from(self._snapshot, self._searcher, rest, slot_of, self._slot_of)

        closed = [qid for qid, row in zip(ids, rows, strict=True) if marks[row] is not False]
        lands_on = lead(closed, fetch) if closed else {}
        return [landing(qid, lands_on.get(qid, [qid]), slot_of) for qid in ids]

    def stored(self, ids, fetch):
        # Candidates whose ids were asked for are read where the search found them (no
        # lookup by id), and kept by slot: a slot's document never changes; so are the
        # originals hits lead to, where this searcher's slot of them is known and the
        # question kept; the others are looked up in the same snapshot (what a search reads
        # is one generation's).
        found = {}
        slotted = self._landings is not None and self._slots  # (numbers are not slots)
        led_to = self._landings.slot_of if slotted else {}
        kept = self._snapshot.stored_at_slot
        for qid in ids:
            row = self._row_of.get(qid)
            if row is not None:
                found[qid] = self._question(row)
            elif qid in led_to and led_to[qid] in kept:
                found[qid] = kept[led_to[qid]]
        rest = [qid for qid in ids if qid not in found]
        if not rest:
            return found
        if self._searcher is None:  # no hits: nothing was searched
            return found | fetch(rest)
        return found | fetch_from(self._snapshot, self._searcher, rest)

    def _question(self, row: int) -> Question:
        slot = self._slots[row] if self._slots else -1
        return _stored_question(
            self._snapshot, slot, self._searcher, self._addresses[row], self._read.get(row)
        )


def fetch_from(
    snapshot: Snapshot,
    searcher,
    ids: Sequence[str],
    slot_of: dict | None = None,
    slot: Callable | None = None,
) -> dict[str, Question]:
    """The stored questions of ``ids`` that ``searcher`` (of ``snapshot``) finds, by id
    (``slot_of``: what ``slot(vector slot, address)`` gives each is added to it, where not
    None)."""
    query = id_query(snapshot.index.schema, ids)
    addresses = [address for _, address in searcher.search(query, len(set(ids)), count=False).hits]
    slots = searcher.fast_field_values("slot", addresses) if addresses else []
    found = {}
    for at, address in zip(slots, addresses, strict=True):
        question = _stored_question(snapshot, -1 if at is None else at, searcher, address)
        found[question.id] = question
        if slot_of is not None and (stands_for := slot(at, address)) is not None:
            slot_of[question.id] = stands_for
    return found


def _stored_question(snapshot: Snapshot, slot: int, searcher, address, doc=None) -> Question:
    """The question of the document at ``address`` (``doc``: already read), kept in the
    snapshot by its vector slot (a slot's document never changes; -1: no slot, not kept)."""
    kept = snapshot.stored_at_slot
    question = kept.get(slot) if slot >= 0 else None
    if question is None:
        fields = (doc or searcher.doc(address)).to_dict()
        question = question_of(fields["id"][0], fields)
        if slot >= 0:
            if len(kept) >= _STORED_KEPT:  # a new map: the one another thread reads stays whole
                kept = snapshot.stored_at_slot = {}
            kept[slot] = question
    return question
