"""``qres compact``: reclaiming the space of replaced and deleted questions' vectors."""

from __future__ import annotations

import click

from qres.cli.group import Context, console, json_option


@click.command()
@json_option
@click.pass_obj
def compact(obj: Context):
    """Reclaim the space of replaced and deleted questions' vectors.

    Re-running `qres index` leaves the old vectors of replaced questions behind
    (`qres info` counts them as dead_vector_rows). Compaction copies the live
    ones into a fresh index beside the old and swaps it in: a crash at any point
    leaves the old index or the new one, never a mix; searches go on meanwhile.

    \b
    Example:
      qres compact
    """
    obj.on_interrupt = "a compaction is swapped in whole: the index is as it was, or compacted"
    with obj.open() as backend:
        figures = backend.compact()
    if obj.as_json:
        obj.emit(figures)
        return
    before, after = figures["before"], figures["after"]
    console.print(
        f"vector rows: {before.get('vector_rows', 0):,} → {after.get('vector_rows', 0):,} "
        f"({before.get('dead_vector_rows', 0):,} dead rows reclaimed)"
    )
