"""Options a user gave that would do nothing where they were given: refused, not ignored."""

from __future__ import annotations

import click
from click.core import ParameterSource


def given(name: str) -> bool:
    """Whether the running command's option ``name`` (its parameter name) was given, rather
    than left at its default."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (None, ParameterSource.DEFAULT)


def refuse_given(*names: str, why: str) -> None:
    """A usage error naming the first of the options ``names`` that was given: ``why`` says
    where it works instead."""
    command = click.get_current_context().command
    for name in names:
        if given(name):
            option = next(p for p in command.params if p.name == name)
            raise click.BadParameter(why, param_hint="/".join(option.opts + option.secondary_opts))


def not_nan(_ctx, _param, value: float) -> float:
    """A number option's callback refusing nan, which every range check lets through."""
    if value != value:
        raise click.BadParameter("nan is not a number")
    return value


def refuse_conflicting(links_file, no_links, prune, rebuild, mix, no_vectors, models) -> None:
    """``qres index``'s options that rule each other out (``models``: any given)."""
    if links_file and no_links:
        raise click.UsageError("--links FILE and --no-links: give one or the other")
    if prune and (rebuild or mix):  # a rebuild holds the file's questions alone already
        raise click.UsageError("--prune goes without --rebuild and --add-to-existing")
    if no_vectors and (models or not rebuild):
        raise click.UsageError("--no-vectors goes with --rebuild, without --model or --model-set")
