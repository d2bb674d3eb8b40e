"""One generation of an embedded index as reads see it, and the commits it follows.

Reopening the index (after a swap) replaces the whole :class:`Snapshot`, never its parts,
so a read that began on one generation uses that generation's objects only. Within it,
tantivy's reader is reloaded only when told (its ``Manual`` policy), so that each searcher
comes with what searches learn of it (:class:`~qres.backends.embedded.landings.Landings`):
this process's own commits reload it at once, and before each read a look at tantivy's
``meta.json`` tells whether another process committed (a stat on every read, its content
when the stat changed or half a second went by: a file replaced within one clock tick can
keep its stat).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tantivy

from qres.backends.embedded.directory import file_stamp
from qres.backends.embedded.landings import Landings

_RECHECK_S = 0.5  # meta.json is read again at least this often, its stat unchanged or not


class Snapshot:
    """An index's tantivy index (of ``engine``, its directory) and what reads learn from
    it; what they learn is never kept for another generation (a nearest search's slots and
    their ids, say)."""

    def __init__(
        self,
        index: tantivy.Index | None = None,
        marks_closed: bool = False,
        engine: Path | None = None,
    ):
        self.index = index
        self.marks_closed = marks_closed  # its documents have the ``closed`` fast field
        self.vectors: dict[int, np.ndarray] = {}  # read-only memory maps, replaced as files grow
        # nearest()'s int8 copies of the vector files and each row's scale (rows are only
        # ever appended, so a copy grows by the new rows)
        self.scan_vectors: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # nearest()'s live rows (keyed by what tells they changed) and the id at each row
        self.live_slots: tuple[tuple, np.ndarray] | None = None
        self.id_at_slot: dict[int, str] = {}
        self.slot_of: dict[str, int] = {}  # vectors()'s slot of each id, until the next commit
        # nearest()'s ANN files by model (qres.backends.embedded.ann): (its path, its stat,
        # the open file or None), the live rows past what they cover (keyed as live_slots is)
        # and those rows' int8 copies (first row, rows, scales)
        self.ann: dict[int, tuple] = {}
        self.tail_slots: tuple[tuple, np.ndarray] | None = None
        self.tail_scan: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
        # stored questions read for search results, by slot (a slot's document never changes)
        self.stored_at_slot: dict = {}
        self._meta_path = engine / "meta.json" if engine is not None else None
        self._reloading = threading.Lock()
        self._seen = self._meta_seen()  # before the searcher: it holds at least that commit
        self.reading: tuple | None = None  # (the searcher, its Landings): taken together
        if index is not None:
            index.config_reader("Manual")
            self.reading = (index.searcher(), Landings())

    def reload(self) -> None:
        """Let reads see the last commit, with a new searcher and nothing learnt of it."""
        self.index.reload()
        self.reading = (self.index.searcher(), Landings())
        self.slot_of = {}  # ids replaced since have other slots now

    def follow_commits(self, same_directory: Callable[[], bool] = lambda: True) -> None:
        """Reload if another process committed since the last look (the stat of
        ``meta.json`` changed, or half a second went by and its content did), unless
        ``same_directory()`` says a swap put another index at this one's path: tantivy would
        reload that one's files into this generation (the caller reopens it instead; a read
        a swap overtakes here is read again, as any read overlapping a swap)."""
        if self._meta_path is None or self.index is None:
            return
        stat, text, checked = self._seen
        if file_stamp(self._meta_path) == stat and time.monotonic() < checked + _RECHECK_S:
            return
        with self._reloading:  # one thread reloads; the others then see it done
            seen = self._meta_seen()
            if seen[1] is not None and seen[1] != self._seen[1]:
                if not same_directory():
                    return
                try:
                    self.reload()
                except ValueError:  # its files not all there (yet): the next read tries again
                    return
            self._seen = seen

    def _meta_seen(self) -> tuple:
        """(meta.json's stat, its content, when read)."""
        if self._meta_path is None:
            return None, None, 0.0
        stat = file_stamp(self._meta_path)
        try:
            text = self._meta_path.read_bytes()
        except OSError:  # mid-swap: the next look reads it
            text = None
        return stat, text, time.monotonic()
