"""Where the command line prints: messages and progress on standard error (``console``),
tables on standard output (``stdout``), whole lines when standard output is not a terminal."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from rich.console import Console, ConsoleDimensions
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
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
        TimeRemainingColumn(),  # "-:--:--" until a total is known
        console=console,
        disable=not console.is_terminal,
    )


class QuestionsDone:
    """A task of ``progress`` for the questions of ``corpus`` (read as ``fmt``): its rate as
    they are done, and its total once counted (:mod:`qres.corpus.sizing`), hence the time
    left."""

    def __init__(self, progress: Progress, corpus: str | Path, fmt: str):
        from qres.corpus.sizing import count_beside  # read by `qres index` only

        self._progress, self._started = progress, time.perf_counter()
        self._name = Path(corpus).name
        self._task = progress.add_task(f"indexing {self._name}", total=None, rate="")
        count_beside(corpus, fmt, self._counted)

    def __call__(self, n: float) -> None:
        task = self._state()
        done = task.completed + n
        rate = done / max(time.perf_counter() - self._started, 1e-9)
        # every question encoded: the last batches are written and committed before the end
        said = f"committing {self._name}" if task.total and done >= task.total else None
        self._progress.update(
            self._task, advance=n, rate=f"{rate:,.0f} questions/s", description=said
        )

    def _state(self):  # tasks are listed, not indexed, by id: another may have been removed
        return next(task for task in self._progress.tasks if task.id == self._task)

    def finish(self) -> None:
        """The bar full: the count is an estimate (lines skipped, questions already indexed)."""
        done = self._state().completed
        self._progress.update(self._task, total=done, description=f"indexed {self._name}")

    def _counted(self, total: int) -> None:
        done = self._state().completed
        self._progress.update(self._task, total=max(total, done))


def summary_lines(summary: dict) -> list[str]:
    """What ``qres index`` says when it is done, from its ``--json`` summary."""
    name, indexed = os.path.basename(summary["corpus"]), summary["indexed"]
    counts = [
        _counted(summary["skipped"], "skipped", "skipped"),
        _counted(
            summary["duplicates_replaced"], "duplicate id (last kept)", "duplicate ids (last kept)"
        ),
        _counted(summary["truncated"], "truncated", "truncated"),
        _counted(summary["unchanged"], "already indexed as it is", "already indexed as they are"),
    ]
    lines = [
        f"indexed {indexed:,} question{'' if indexed == 1 else 's'} in {summary['seconds']:.1f}s "
        f"({summary['docs_per_second']:,.0f}/s); "
        + "".join(f"{count}, " for count in counts if count)
        + f"index now holds {summary['index_size']:,}"
        + (" with vectors" if summary["vectors"] else "")
    ]
    if summary["duplicate_links"]:
        read, known = summary["closed_duplicates_read"], summary["closed_duplicates_known"]
        others = f" (and {known - read:,} that {name} does not hold)" if known > read else ""
        lines.append(
            f"{os.path.basename(summary['duplicate_links'])} closes {read:,} of the questions of "
            f"{name} as duplicates{others}: search shows their originals in their place"
        )
    if summary["undecodable"]:
        n, first = summary["undecodable"], summary["first_undecodable"]
        which = "a question holds" if n == 1 else f"{n:,} questions (the first here) hold"
        lines.append(
            f"warning: {first}: {which} U+FFFD (\ufffd), what bytes that are not UTF-8 become: "
            f"a file in another encoding needs converting (iconv -f latin1 -t utf-8 "
            f"{summary['corpus']}) and indexing again"
        )
    if summary["vectors_dropped"]:
        lines.append(
            "rebuilt without vectors (--no-vectors): dropped those of "
            f"{', '.join(summary['vectors_dropped'])}"
        )
    if not summary["vectors"] and not summary["vectors_dropped"]:
        lines.append(
            "BM25 alone: index again with --rebuild --model-set minilm to rank by meaning too "
            "(the README's main job; --model-set fast for a forum of millions)"
        )
    if summary["questions_given_new_vectors"]:
        lines.append(
            f"added the vectors of {', '.join(summary['models_added'])} (new to the index) to "
            f"the {summary['questions_given_new_vectors']:,} questions it held"
        )
    if summary["compacted_dead_vector_rows"]:
        rows = summary["compacted_dead_vector_rows"]
        lines.append(f"compacted the index: {rows:,} dead vector rows reclaimed")
    if summary["pruned"]:
        pruned = summary["pruned"]
        lines.append(f"pruned {pruned:,} question{'s' * (pruned != 1)} {name} no longer holds")
    lines += [f"  skipped: {problem}" for problem in summary["skipped_examples"]]
    return lines


def _counted(n: int, one: str, many: str) -> str:
    """``n`` and what it counts (nothing for none)."""
    return f"{n:,} {one if n == 1 else many}" if n else ""


def say_indexed(obj, summary: dict, warning: str | None) -> None:
    """Print ``qres index``'s summary, as JSON or as lines, then ``warning`` (links that close
    nothing: said instead of the line claiming their effect)."""
    if obj.as_json:
        obj.emit(summary)
    else:
        for line in summary_lines({**summary, **({"duplicate_links": None} if warning else {})}):
            console.print(line, highlight=False, markup=False)
    if warning:
        console.print(warning, highlight=False, markup=False)


def writing_first() -> None:
    console.print("stopping: writing what is encoded first (Ctrl-C again to drop it)")


def committed_line(committed: int, held: int | None = None, pruned: int | None = None) -> str:
    """What Ctrl-C during ``qres index`` says last: the questions this run committed (the
    index keeps them) and, where counted, those the index holds; once ``pruned`` is known
    (pruning comes last), that the run was done."""
    if pruned is not None:
        holds = "" if held is None else f"; the index holds {held:,}"
        return (
            f"the run was done: {committed:,} question{'s' * (committed != 1)} committed and "
            f"{pruned:,} that the file no longer holds pruned{holds}"
        )
    again = "; the same command again indexes the rest"
    if not committed:
        holds = "" if held is None else f" (the index holds {held:,})"
        return f"this run committed no questions{holds}{again}"
    s = "" if committed == 1 else "s"
    holds = "" if held is None else f" (it holds {held:,})"
    return f"this run committed {committed:,} question{s}, kept in the index{holds}{again}"


@contextlib.contextmanager
def counted_when_interrupted(
    obj, backend, committed: list[int], rebuild: bool, pruned: list[int] | None = None
):
    """Ctrl-C outside a rebuild (discarded whole): ``obj.on_interrupt`` counts the questions
    this run committed (``committed[0]``), those it pruned (``pruned``, once committed) and
    those the index holds, asked while it is open."""
    try:
        yield
    except KeyboardInterrupt:
        if not rebuild:
            done = pruned[0] if pruned else None
            obj.on_interrupt = committed_line(committed[0], None, done)
            with contextlib.suppress(Exception):  # one that cannot count: the run's own count
                obj.on_interrupt = committed_line(committed[0], backend.count(), done)
        raise


@contextlib.contextmanager
def said_if_swapped(obj, backend):
    """An interruption that lands in the swap of a rebuild is held back until the swap is
    done (the rebuilt index is in place then): say so, not that the rebuild was discarded."""
    try:
        yield
    except KeyboardInterrupt:
        if backend.swapped_in:
            obj.on_interrupt = "the rebuild was finished first: the index is the rebuilt one"
        raise
