"""The ``qres`` command line: a thin layer over the library. :mod:`qres.cli.group` holds the
group, its options and the one-line error handling; each command lives in the module of its
group (``index``, ``search``, ``evaluate``, ``tune_fusion``, ``serve``; training commands in
:mod:`qres.training.commands`) and parses its options, calls library code and prints."""

from qres.cli.group import Terminated, cli, main

__all__ = ["Terminated", "cli", "main"]
