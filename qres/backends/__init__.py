"""Search backends behind one interface (:class:`qres.backends.base.Backend`)."""

from __future__ import annotations

import os
from pathlib import Path

from qres.backends.base import Backend, BackendError, Hit

BACKENDS = ("embedded", "elasticsearch")

__all__ = ["BACKENDS", "Backend", "BackendError", "Hit", "open_backend"]


def open_backend(
    name: str | None, index_dir: str | Path, create: bool = False, **settings
) -> Backend:
    """The backend ``name`` (default ``$QRES_BACKEND`` or embedded) for the index at
    ``index_dir`` (embedded) or the index named by settings/env (Elasticsearch)."""
    name = name or os.environ.get("QRES_BACKEND", "embedded")
    if name == "embedded":
        from qres.backends.embedded import EmbeddedBackend

        return EmbeddedBackend(index_dir, create=create, **settings)
    if name == "elasticsearch":
        from qres.backends.elasticsearch import EsBackend

        return EsBackend(create=create, **settings)
    raise BackendError(f"unknown backend {name!r} (one of {', '.join(BACKENDS)})")
