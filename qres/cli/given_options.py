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
