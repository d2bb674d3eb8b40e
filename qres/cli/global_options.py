"""The ``qres`` group's options after the command's name too: ``qres index F --index-dir D``
does what ``qres --index-dir D index F`` does (and ``--backend``, ``--json``, ``--device``)."""

from __future__ import annotations

import click

# Each option, by its parameter name, and the attribute of the group's context object
# (qres.cli.group.Context) it sets.
GLOBAL_OPTIONS = {
    "index_dir": "index_dir",
    "backend": "backend_name",
    "as_json": "as_json",
    "device": "device",
}


# The commands that print JSON with --json; the others do not take it.
JSON_COMMANDS = ("index", "info", "compact", "search", "evaluate", "compare-runs", "tune-fusion")
JSON_COMMANDS += ("tags",)


def refuse_json_where_none(ctx: click.Context, as_json: bool) -> None:
    """``qres --json COMMAND`` for a command that prints no JSON: a usage error, not ignored."""
    if as_json and ctx.invoked_subcommand not in (None, *JSON_COMMANDS):
        raise click.UsageError(f"qres {ctx.invoked_subcommand} prints no JSON: leave out --json")


def take_global_options(command: click.Command, group: click.Group, json: bool = True) -> None:
    """Give ``command`` a copy of each of the group's options, except one it has of its own
    (``train --device``), and ``--json`` unless it prints JSON (``json``); given after the
    command, it overrides the group's."""
    if getattr(command, "_takes_global_options", False):
        return
    command._takes_global_options = True
    own = {opt for param in command.params for opt in param.opts}
    for option in group.params:
        if option.name not in GLOBAL_OPTIONS or own & set(option.opts):
            continue
        if option.name == "as_json" and not json:
            continue

        def land(ctx, _param, value, attribute=GLOBAL_OPTIONS[option.name]):
            if value is not None and value is not False:
                setattr(ctx.obj, attribute, value)

        command.params.append(
            click.Option(
                option.opts,
                type=option.type,
                is_flag=option.is_flag,
                default=False if option.is_flag else None,
                expose_value=False,
                callback=land,
                help=f"{option.help} Also before the command.",
            )
        )
