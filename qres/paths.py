"""Where qres keeps its indexes and downloaded data: ``$QRES_HOME`` or the user data dir."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import platformdirs


def home() -> Path:
    env = os.environ.get("QRES_HOME")
    if not env:
        return Path(platformdirs.user_data_dir("qres"))
    path = Path(env).expanduser()
    if path.exists() and not path.is_dir():  # else every command fails, each its own way
        raise NotADirectoryError(errno.ENOTDIR, "QRES_HOME is a file, not a folder", str(path))
    return path


def data_dir() -> Path:
    """Downloaded datasets (``qres download``)."""
    return home() / "data"


def default_index_dir() -> Path:
    return home() / "index"


def repo_shared_data() -> Path:
    """``../shared/data`` beside a source checkout (where the project's reference data lives)."""
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"
