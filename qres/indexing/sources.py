"""What an index was built from: the corpus files ``qres index`` read into it, kept in the
index metadata, so that indexing another forum into it is refused unless asked for (a demo
index silently turning into a mix of two forums is never what a user meant)."""

from __future__ import annotations

import os
from pathlib import Path

from qres.backends.base import Backend, BackendError

CORPORA = "corpora"  # index metadata: the corpus files read into the index, oldest first


def corpora(backend: Backend) -> list[str]:
    """The corpus files the index was built from (absolute paths; empty if not recorded)."""
    return list(backend.metadata().get(CORPORA) or [])


def source(corpus: str | Path) -> str:
    """How the index names ``corpus``: a file by its absolute path, a pipe as it was given."""
    return str(Path(corpus).resolve()) if Path(corpus).is_file() else str(corpus)


def check_and_record(backend: Backend, corpus: str | Path, mix: bool) -> None:
    """Refuse, before anything is written, a corpus other than the ones an index holding
    questions was built from, unless ``mix`` (one line naming both and the ways on); record
    ``corpus`` among them otherwise."""
    path, held, count = source(corpus), corpora(backend), backend.count()
    if path in held:
        return
    if held and count > 0 and not mix:
        more = f" and {len(held) - 1} more" if len(held) > 1 else ""
        raise BackendError(
            f"this index holds {shown(held[0])}{more}, not {shown(path)}: give it its own "
            "index with --index-dir DIR, replace the index with --rebuild, or mix them with "
            "--add-to-existing"
        )
    backend.set_metadata({CORPORA: [*held, path] if count > 0 else [path]})


def shown(path: str) -> str:
    """``path`` relative to the working directory when it is under it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative
