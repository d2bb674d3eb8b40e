"""The training commands, a module each: ``qres train`` (:mod:`.train`; the options of its
optional methods in :mod:`.train_options`), ``qres export-onnx`` (:mod:`.export`) and
``qres import-encoder`` (:mod:`.import_encoder`). torch is imported only when a command runs."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

TORCH_MISSING = "torch is not installed: pip install 'qres[train]'"


def fail(message: str) -> NoReturn:
    """Print ``error: MESSAGE`` (one line) and exit with status 1."""
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        fail(TORCH_MISSING)
