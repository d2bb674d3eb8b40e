"""When ``qres index`` compacts by itself: once the vectors of replaced questions outnumber
the live ones, and are many enough for the copy to be worth it."""

from __future__ import annotations

from qres.backends.base import Backend

AUTO_COMPACT_MIN_DEAD_ROWS = 1_000


def compact_if_mostly_dead(backend: Backend) -> int:
    """Compact when replaced questions' vectors outnumber the live ones (and are at least
    AUTO_COMPACT_MIN_DEAD_ROWS); returns the dead rows reclaimed (0: no compaction). Not
    during a rebuild (a compaction is one): the next run compacts the rebuilt index."""
    if backend.rebuilding:
        return 0
    figures = backend.storage()
    dead = figures.get("dead_vector_rows", 0)
    if dead < AUTO_COMPACT_MIN_DEAD_ROWS or dead <= figures["vector_rows"] - dead:
        return 0
    backend.compact()
    return dead
