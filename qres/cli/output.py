"""Where the command line prints: messages and progress on standard error (``console``),
tables on standard output (``stdout``), whole lines when standard output is not a terminal."""

from __future__ import annotations

import os

from rich.console import Console, ConsoleDimensions
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

# markup=False: user text (titles, server messages like "action [x] is unauthorized") is
# printed as it is; rich would take its bracketed parts for markup and drop them.
console = Console(stderr=True, soft_wrap=True, markup=False)
PIPED_WIDTH = 1000  # columns of standard output when it is not a terminal


class _Stdout(Console):
    """Standard output: a terminal's width, or whole lines when it is a pipe or a file, so
    that a table piped to grep or saved keeps each title on one line. A width set on it, or
    $COLUMNS, wins; $COLUMNS is read when printing (rich reads it once, when made)."""

    def __init__(self, **options):
        super().__init__(**options)
        self._width = self._height = None  # what rich read from $COLUMNS/$LINES: read later

    @property
    def size(self) -> ConsoleDimensions:
        columns = os.environ.get("COLUMNS", "")
        if self._width is None and not columns.isdigit() and not self.is_terminal:
            return ConsoleDimensions(PIPED_WIDTH, super().size.height)
        return super().size


stdout = _Stdout(markup=False)


def progress_display() -> Progress:
    """A progress display on standard error, shown on a terminal only."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )
