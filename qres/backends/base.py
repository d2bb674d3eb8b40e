"""The interface every search backend implements (embedded tantivy, Elasticsearch).

The contract suite in ``tests/backends/contract.py`` is written against this class and run
for each backend, so "same behaviour on every backend" is checked, not hoped for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qres.corpus import Question


class BackendError(RuntimeError):
    """A problem the user can act on (missing index, unreachable server, …): one sentence."""


@dataclass(frozen=True)
class Hit:
    id: str
    score: float


class Backend(ABC):
    """A question index: BM25 over title and body, stored fields, optional dense vectors."""

    name: str

    @abstractmethod
    def upsert(self, questions: Sequence[Question], vectors: np.ndarray | None = None) -> None:
        """Add or replace questions by id (``vectors``: one row per question, or None)."""

    @abstractmethod
    def delete(self, ids: Sequence[str]) -> None:
        """Remove questions by id; unknown ids are ignored."""

    @abstractmethod
    def commit(self) -> None:
        """Make everything upserted or deleted so far durable and visible to searches."""

    @abstractmethod
    def search(self, text: str, k: int, only_ids: Sequence[str] | None = None) -> list[Hit]:
        """BM25 top-``k`` for the user's ``text``, taken as plain words, never query syntax.

        ``only_ids`` restricts the result to those questions (re-ranking a given candidate
        list); among them, ones that match no query term come back with score 0.
        """

    @abstractmethod
    def fetch(self, ids: Sequence[str]) -> dict[str, Question]:
        """Stored questions by id; ids not in the index are absent from the result."""

    @abstractmethod
    def vectors(self, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(float32 matrix with a row per id, bool mask of the rows that have a vector)."""

    @abstractmethod
    def count(self) -> int:
        """Number of questions visible to searches."""

    @abstractmethod
    def metadata(self) -> dict:
        """Index-level metadata (model fingerprint, vector dims, …)."""

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

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release files and connections."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
