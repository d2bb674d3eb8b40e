"""What an index was built from: the corpus files ``qres index`` read into it, kept in the
index metadata, so that indexing another forum into it is refused unless asked for (a demo
index silently turning into a mix of two forums is never what a user meant)."""

from __future__ import annotations

import os
from pathlib import Path

from qres.backends.base import Backend, BackendError
from qres.corpus.files import STDIN
from qres.encoders.card import CARD_FILE

CORPORA = "corpora"  # index metadata: the corpus files read into the index, oldest first


def corpora(backend: Backend) -> list[str]:
    """The corpus files the index was built from (absolute paths; empty if not recorded)."""
    return list(backend.metadata().get(CORPORA) or [])


def source(corpus: str | Path) -> str:
    """How the index names ``corpus``: a file by its absolute path, a pipe as it was given."""
    return str(Path(corpus).resolve()) if Path(corpus).is_file() else str(corpus)


def check_made_with(backend: Backend, given: dict) -> None:
    """Refuse settings only a new index takes (``given``: analyzer, title_boost) that differ
    from those the index was made with, rather than ignore them."""
    meta = backend.metadata()
    for name, value in given.items():
        if name in meta and meta[name] != value:
            raise BackendError(
                f"--{name.replace('_', '-')} {value}: this index was made with {meta[name]}, "
                f"which only a new index changes: add --rebuild to index it anew with {value}"
            )


# The ways on from a refused corpus, as qres index's flags.
CLI_WAYS = (
    "give it its own index with --index-dir DIR, replace the index with --rebuild, or mix them "
    "with --add-to-existing"
)


def check_corpus(backend: Backend, corpus: str | Path, mix: bool, ways: str = CLI_WAYS) -> None:
    """Refuse, before anything is written, a corpus other than the ones an index holding
    questions was built from, unless ``mix`` (one line naming both and ``ways`` on)."""
    path, held, count = source(corpus), corpora(backend), backend.count()
    if path in held:
        return
    if held and count > 0 and not mix:
        more = f" and {len(held) - 1} more" if len(held) > 1 else ""
        raise BackendError(f"this index holds {shown(held[0])}{more}, not {shown(path)}: {ways}")


def held_model_dirs(open_index) -> list[str]:
    """The model directories of the index ``open_index()`` opens as it is (none where there
    is no index yet)."""
    from qres.indexing.pipeline import index_model_dirs

    try:
        with open_index() as live:
            return index_model_dirs(live)
    except BackendError:
        return []


def kept_model_dirs(open_index) -> tuple[Path, ...]:
    """The model directories a rebuild of the index ``open_index()`` opens keeps: its own,
    each of which must still be a model."""
    held = held_model_dirs(open_index)
    for model_dir in held:
        if not Path(model_dir, CARD_FILE).is_file():
            raise BackendError(
                f"the index's model {model_dir or '(unrecorded)'} is gone, so a rebuild cannot "
                "keep its vectors: rebuild with --model-set NAME or --model DIR, or with "
                "--no-vectors for BM25 alone"
            )
    return tuple(Path(d) for d in held)


def record_corpus(backend: Backend, corpus: str | Path) -> None:
    """Record ``corpus`` among those the index was built from (once its first questions are
    written: a run that fails before then leaves the index's record as it was)."""
    path, held = source(corpus), corpora(backend)
    if path not in held:
        backend.set_metadata({CORPORA: [*held, path] if backend.count() > 0 else [path]})


def shown(path: str) -> str:
    """``path`` relative to the working directory when it is under it."""
    if path == STDIN:
        return "standard input"
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative
