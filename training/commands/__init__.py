"""The training commands, a module each: ``qres train`` (:mod:`.train`; the options of its
optional methods in :mod:`.train_options`), ``qres export-onnx`` (:mod:`.export`) and
``qres import-encoder`` (:mod:`.import_encoder`). torch is imported only when a command runs."""

from __future__ import annotations

import re
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


def torch_device(_ctx, _param, name: str) -> str:
    """--device: auto, cpu, cuda or cuda:N (torch's own error for another is a traceback)."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name.strip().lower()):
        raise click.BadParameter(f"{name!r} is not auto, cpu, cuda or cuda:N")
    return name.strip().lower()
