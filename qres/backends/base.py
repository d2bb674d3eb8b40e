"""The interface every search backend implements (embedded tantivy, Elasticsearch).

The contract suite in ``tests/backends/contract.py`` is written against this class and run
for each backend, so "same behaviour on every backend" is checked, not hoped for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import ChainMap
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qres.corpus.readers import MAX_ID_BYTES, Question, id_problem


class BackendError(RuntimeError):
    """A problem the user can act on (missing index, unreachable server, …): one sentence."""


class IndexMissingError(BackendError):
    """No index at the place named: a state to report (``qres info``), not a failure."""


class IndexFormatError(BackendError):
    """The index on disk was written in a layout this qres does not read."""


class IndexBusy(BackendError):
    """Another process holds the index's writer lock (a write can be tried again later)."""


@dataclass(frozen=True)
class Hit:
    id: str
    score: float


def index_models(meta: dict) -> list[dict]:
    """The models whose vectors an index holds (``model_fingerprint``, ``vector_dim``,
    ``model_dir`` each), in the order of its vector files (see ``qres.backends.embedded``)."""
    first = {k: meta.get(k) for k in ("model_fingerprint", "vector_dim", "model_dir")}
    return ([first] if first["model_fingerprint"] else []) + list(meta.get("more_models", []))


def check_ids(questions: Sequence[Question]) -> None:
    """Refuse a question whose id no backend can address (over :data:`MAX_ID_BYTES`, a
    control character): stored, it could never be fetched, replaced or deleted."""
    for question in questions:
        problem = id_problem(question.id)
        if problem:
            raise BackendError(
                f"cannot store a question: {problem} (an id is 1 to {MAX_ID_BYTES} bytes of "
                "UTF-8 without control characters)"
            )


SEVERAL = -2  # in Landed.to: the hit leads to several questions (Landed.several says which)


@dataclass
class Landed:
    """Where a ranking's hits lead when duplicate links are followed, by vector slot (or
    a number that stands for one in an index without vectors;
    :meth:`Candidates.landing_slots`)."""

    slots: np.ndarray  # each hit's slot, in rank order
    to: np.ndarray  # the slot each leads to (its own where it stands for itself) or SEVERAL
    names: Mapping[int, str]  # the id at each slot that hits lead to from other slots
    several: dict[int, tuple[tuple[int, str], ...]]  # by position: (slot, id) of each


class Candidates:
    """A query's BM25 candidates, best first: their scores, and with a query vector each
    one's cosine to it; ids are read on demand, for the rows the ranking keeps.

    This default holds a search's hits; the embedded backend overrides it to read vector
    slots from a fast field and ids of the final ``k`` only.
    """

    def __init__(
        self,
        hits: Sequence[Hit],
        cosine: np.ndarray | None = None,
        has_vector: np.ndarray | None = None,
        cosines: dict | None = None,
    ):
        self._hits = list(hits)
        self.slot_space = None  # what numbers the vector slots landing_slots tells (if any)
        self.scores = np.array([h.score for h in hits], dtype=np.float64)  # as the engine gave
        self.cosine, self.has_vector = cosine, has_vector
        # With a query vector per model ({fingerprint: vector}): each model's cosines.
        self.cosines = cosines

    def __len__(self) -> int:
        return len(self.scores)

    def ids(self, rows: Sequence[int]) -> list[str]:
        """The ids of the candidates at ``rows`` (positions in best-first order)."""
        return [self._hits[i].id for i in rows]

    def stored(
        self, ids: Sequence[str], fetch: Callable[[Sequence[str]], dict[str, Question]]
    ) -> dict[str, Question]:
        """The stored questions of ``ids``, as ``fetch`` (:meth:`Backend.fetch`) returns
        them; a backend may read those among these candidates where its search found them
        instead of looking them up again."""
        return fetch(ids) if ids else {}

    def not_closed(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` (candidates whose ids were read) known not to be closed as
        duplicates: following duplicate links need not read their stored questions. A
        backend that keeps no such mark knows none."""
        return set()

    def landing_slots(self, rows: Sequence[int], lead: Callable) -> Landed | None:
        """Where the candidates at ``rows`` (in rank order) lead when duplicate links are
        followed, told by vector slot; ``lead(ids, fetch)`` tells where hits lead by id, for
        a backend that works it out once and keeps it. None where it cannot tell this way
        (the ids are then read: :func:`qres.ranking.duplicates.follow`)."""
        return None

    def rescored(self, query_vector) -> Candidates | None:
        """These candidates with their cosines to ``query_vector`` (as ``candidates`` gives
        them), where the backend can add them without searching again; else None."""
        return None

    @staticmethod
    def joined(first: Candidates, second: Candidates) -> Candidates:
        """``first``'s candidates, then ``second``'s (scored for the same query vectors)."""
        return _Joined(first, second)


class _Joined(Candidates):
    def __init__(self, first: Candidates, second: Candidates):
        self._parts, self._split = (first, second), len(first)
        self.slot_space = first.slot_space if first.slot_space is second.slot_space else None
        self.scores = np.concatenate([first.scores, second.scores])
        self.cosine = self.has_vector = self.cosines = None
        if first.cosine is not None and second.cosine is not None:
            self.cosine = np.concatenate([first.cosine, second.cosine])
            self.has_vector = np.concatenate([first.has_vector, second.has_vector])
        if first.cosines is not None and second.cosines is not None:
            self.cosines = {
                fp: np.concatenate([c, second.cosines[fp]]) for fp, c in first.cosines.items()
            }

    def ids(self, rows: Sequence[int]) -> list[str]:
        rows = list(rows)
        first = self._parts[0].ids([r for r in rows if r < self._split])
        second = self._parts[1].ids([r - self._split for r in rows if r >= self._split])
        by_row = dict(zip([r for r in rows if r < self._split], first, strict=True))
        by_row |= dict(zip([r for r in rows if r >= self._split], second, strict=True))
        return [by_row[r] for r in rows]

    def not_closed(self, ids):
        first, second = self._parts
        return first.not_closed(ids) | second.not_closed(ids)

    def landing_slots(self, rows, lead):
        first, second = self._parts
        if first.slot_space is None or first.slot_space is not second.slot_space:
            return None  # (a swap between the two searches numbered the slots anew)
        rows = np.asarray(rows, np.int64)
        in_first = rows < self._split
        at = np.flatnonzero(in_first), np.flatnonzero(~in_first)
        parts_rows = rows[at[0]], rows[at[1]] - self._split
        parts = [p.landing_slots(r, lead) for p, r in zip(self._parts, parts_rows, strict=True)]
        if parts[0] is None or parts[1] is None:
            return None
        slots, to = np.empty(len(rows), np.int64), np.empty(len(rows), np.int64)
        several = {}
        for positions, part in zip(at, parts, strict=True):
            slots[positions], to[positions] = part.slots, part.to
            several.update((int(positions[p]), lands) for p, lands in part.several.items())
        return Landed(slots, to, ChainMap(parts[0].names, parts[1].names), several)

    def stored(self, ids, fetch):
        first, second = self._parts
        return first.stored(ids, lambda rest: second.stored(rest, fetch))


class Backend(ABC):
    """A question index: BM25 over title and body, stored fields, optional dense vectors."""

    name: str

    @abstractmethod
    def upsert(
        self,
        questions: Sequence[Question],
        vectors: np.ndarray | None = None,
        terms: Sequence | None = None,
    ) -> None:
        """Add or replace questions by id (``vectors``: one row per question, or None;
        ``terms``: :meth:`analysis` of ``questions``, when the backend has one)."""

    def analysis(self) -> Callable[[Sequence[Question]], list] | None:
        """A picklable function from questions to :meth:`upsert`'s ``terms``, so indexing
        can analyse text in other threads or processes; None where the engine does it."""
        return None

    @abstractmethod
    def delete(self, ids: Sequence[str]) -> None:
        """Remove questions by id; unknown ids are ignored."""

    @abstractmethod
    def ids_not_in(self, ids: Collection[str]) -> list[str]:
        """The ids of the committed questions that ``ids`` does not name."""

    @abstractmethod
    def commit(self) -> None:
        """Make everything upserted or deleted so far durable and visible to searches."""

    @abstractmethod
    def search(self, text: str, k: int, only_ids: Sequence[str] | None = None) -> list[Hit]:
        """BM25 top-``k`` for the user's ``text``, taken as plain words, never query syntax.

        ``only_ids`` restricts the result to those questions (re-ranking a given candidate
        list); among them, ones that match no query term come back with score 0.
        """

    def candidates(
        self,
        text: str,
        k: int,
        only_ids: Sequence[str] | None = None,
        query_vector: np.ndarray | None = None,
    ) -> Candidates:
        """:meth:`search`'s top ``k`` as :class:`Candidates`, for ranking before ids are read;
        with ``query_vector``, their cosines too (:meth:`search_with_cosine`)."""
        if query_vector is None:
            return Candidates(self.search(text, k, only_ids))
        return Candidates(*self.search_with_cosine(text, k, query_vector, only_ids))

    completes_first_words = False  # whether title_words() counts (an index made with them)

    def title_words(self, prefix: str, n: int) -> list[tuple[str, int]]:
        """The words of the questions' titles (:func:`qres.text.words`) that start with
        ``prefix``, each with how many live questions' titles hold it, most first (ties
        alphabetically), at most ``n``; none in an index made before titles' words were
        indexed (what completes a first word being typed: :mod:`qres.ranking.completion`)."""
        return []

    @abstractmethod
    def fetch(self, ids: Sequence[str]) -> dict[str, Question]:
        """Stored questions by id; ids not in the index are absent from the result."""

    @abstractmethod
    def vectors(self, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(float32 matrix with a row per id, bool mask of the rows that have a vector).
        A backend of several models takes ``model=FINGERPRINT`` (default: the first)."""

    @abstractmethod
    def count(self) -> int:
        """Number of questions visible to searches."""

    @abstractmethod
    def metadata(self) -> dict:
        """Index-level metadata (model fingerprint, vector dims, …)."""

    metadata_is_local: bool = False  # whether metadata() is read without a request (per search)

    @abstractmethod
    def set_metadata(self, values: dict) -> None:
        """Merge ``values`` into the metadata; durable at once."""

    def search_with_cosine(
        self,
        text: str,
        k: int,
        query_vector: np.ndarray,
        only_ids: Sequence[str] | None = None,
    ) -> tuple[list[Hit], np.ndarray, np.ndarray]:
        """:meth:`search`'s hits with each one's cosine to ``query_vector`` (float32; 0 where
        the bool mask says the hit has no vector). A backend may do it in one request."""
        hits = self.search(text, k, only_ids=only_ids)
        if not hits:
            return hits, np.zeros(0, np.float32), np.zeros(0, bool)
        vectors, has_vector = self.vectors([h.id for h in hits])
        return hits, vectors @ query_vector, has_vector  # both sides are L2-normalised

    supports_nearest: bool = False  # whether nearest() searches the stored vectors

    def nearest(self, query_vector: np.ndarray, k: int, model: str | None = None) -> list[Hit]:
        """The ``k`` stored questions whose vectors have the highest cosine to the
        L2-normalised ``query_vector``, best first, ``Hit.score`` the cosine; questions
        without a vector are never returned. ``model``: a model fingerprint of an index of
        several (None: the first model)."""
        raise BackendError(
            f"the {self.name} backend keeps no searchable vectors: nearest-neighbour search "
            "is not supported"
        )

    def update_nearest(self) -> None:  # noqa: B027 - optional hook
        """Bring what nearest() searches up to date with what was committed, at the end of a
        run of writes (the embedded backend's ANN files; commits keep them roughly so)."""

    several_models: bool = False  # whether it stores a vector per model (upsert's dicts)

    # Whether upsert keeps Question.extras, for fetch to return (an embedded index made
    # before qres stored them cannot: it drops them, saying so once).
    stores_extras: bool = True

    def add_models(self, models: Sequence[dict], encode: Callable) -> int:
        """Give every question that has vectors the vectors of further ``models``
        ({model_fingerprint, vector_dim, model_dir} each): ``encode(questions)`` returns
        ``{fingerprint: rows}``; returns the number of questions encoded."""
        raise BackendError(f"the {self.name} backend stores one model's vectors per index")

    keeps_search_log: bool = False  # whether log_search records searches (Elasticsearch)

    def log_search(self, record: dict) -> None:
        """Record one search (query, mode, latency, top ids) for search analytics."""
        raise BackendError(
            f"the {self.name} backend keeps no search log: use --backend elasticsearch"
        )

    def describe(self) -> dict:
        """Where the index lives and how it is reached, for ``qres info``; empty if nothing
        beyond the metadata (secrets masked)."""
        return {}

    def acquire_write_lock(self) -> None:  # noqa: B027 - optional hook
        """Become the index's one writer now (or fail), before anything is changed; a no-op
        where the backend has no such lock. Writes take it themselves too."""

    # Rebuilds: both shipped backends implement these three (the contract suite checks them).

    def begin_rebuild(self) -> None:
        """Send every write and read of this object to a fresh, empty index; searches by
        others keep seeing the current one until :meth:`finish_rebuild`. Opening with
        ``rebuild=True`` does this without reading the old index."""
        raise BackendError(f"the {self.name} backend cannot rebuild an index")

    def finish_rebuild(self) -> None:
        """Commit the fresh index and replace the current one by it, atomically for readers.
        Leaving a ``with`` block normally does this too."""
        raise BackendError("no rebuild under way: start one with begin_rebuild()")

    # Whether this object's rebuild (or compaction) was swapped in: after that an
    # interruption leaves the rebuilt index in place, not the one before.
    swapped_in: bool = False

    @property
    def rebuilding(self) -> bool:
        """Whether writes go to a rebuild not yet swapped in (an interruption drops them)."""
        return bool(getattr(self, "_rebuilding", False))

    def abort_rebuild(self) -> None:  # noqa: B027 - nothing to drop unless rebuilding
        """Drop the fresh index; the current one stays as it was. An exception leaving a
        ``with`` block, or :meth:`close` during a rebuild, does this too."""

    def storage(self) -> dict:
        """Space figures the user can act on (dead vector rows, …); empty if none apply."""
        return {}

    def leftovers(self) -> list[dict]:
        """What an interrupted rebuild or compaction left behind (``{"path", "bytes",
        "removed_by"}`` each), for ``qres info``; the next writer removes it."""
        return []

    def compact(self) -> dict:
        """Reclaim the space of replaced and deleted questions; returns figures before and
        after."""
        raise BackendError(f"the {self.name} backend reclaims space by itself")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release files and connections."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
