"""How bulk encoding is cut into runs of like length and run side by side on threads."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def distinct(keys: Sequence) -> tuple[list, np.ndarray]:
    """The distinct ``keys`` in first-seen order, and where each key is among them."""
    first: dict = {}
    where = [first.setdefault(key, len(first)) for key in keys]
    return list(first), np.array(where, dtype=np.int64)


def token_runs(lengths: Sequence[int], budget: int, max_rows: int | None = None) -> list[list[int]]:
    """Indices of ``lengths`` by increasing length, cut into runs whose padded size (rows x
    longest) stays within ``budget`` tokens and ``max_rows`` rows; a longer text runs alone."""
    runs: list[list[int]] = []
    run: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        full = max_rows is not None and len(run) >= max_rows
        if run and (full or (len(run) + 1) * max(lengths[i], 1) > budget):
            runs.append(run)
            run = []
        run.append(i)
    if run:
        runs.append(run)
    return runs


def side_by_side(function: Callable, items: Sequence, at_once: int) -> Iterator:
    """``function(item)`` for each item, up to ``at_once`` at a time on threads (onnxruntime
    releases the GIL while it runs), the results in the items' order; a single item runs in
    this thread. A caller that stops early (a progress callback raising on Ctrl-C) leaves at
    most ``at_once`` runs going."""
    if min(at_once, len(items)) <= 1:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(at_once) as pool:
        running: deque = deque()
        for item in items:
            running.append(pool.submit(function, item))
            if len(running) == at_once:
                yield running.popleft().result()
        while running:
            yield running.popleft().result()
