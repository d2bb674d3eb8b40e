"""The ``qres`` command line: a thin layer over the library. :mod:`qres.cli.group` holds the
group, its options and the one-line error handling; each command lives in a module named after
it (``index``, ``info``, ``compact``, ``search``, ``evaluate``, ``compare_runs``,
``tune_fusion``, ``serve``, ...; what evaluate and compare-runs share in ``scores``; training
commands in :mod:`qres.training.commands`) and parses its options, calls library code and
prints."""

from qres.cli.group import Terminated, cli, main

__all__ = ["Terminated", "cli", "main"]
