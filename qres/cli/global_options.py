"""The ``qres`` group's options after the command's name too: ``qres index F --index-dir D``
does what ``qres --index-dir D index F`` does (and ``--backend``, ``--json``, ``--device``),
for the commands each applies to; the others refuse it, before or after their name, rather
than ignore it."""

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
# The commands each option applies to: the index's (--index-dir: the embedded one), the
# encoders' device; evaluate and tune-fusion keep their own indexes under $QRES_HOME/eval.
APPLIES_TO = {
    "as_json": JSON_COMMANDS,
    "index_dir": ("index", "info", "compact", "search", "serve"),
    "backend": ("index", "info", "compact", "search", "serve", "evaluate", "tune-fusion"),
    "device": ("index", "info", "search", "serve", "evaluate", "tune-fusion"),
}
WHAT_IT_DOES = {"as_json": "prints no JSON", "index_dir": "reads no index"}


def _unused(option: click.Option, command: str) -> str:
    does = WHAT_IT_DOES.get(option.name, f"does not use {option.opts[0]}")
    return f"qres {command} {does}: leave out {option.opts[0]}"


def refuse_unused(ctx: click.Context, given: dict) -> None:
    """The group's options ``given`` (by parameter name) before a command they do not apply
    to: a usage error, not ignored (a command's own option of that name goes after it)."""
    command = ctx.invoked_subcommand
    if command is None:
        return
    for option in ctx.command.params:
        if given.get(option.name) in (None, False) or command in APPLIES_TO[option.name]:
            continue
        own = ctx.command.get_command(ctx, command)
        if own is not None and any(set(p.opts) & set(option.opts) for p in own.params):
            raise click.UsageError(f"give {option.opts[0]} after the command: qres {command} ...")
        raise click.UsageError(_unused(option, command))


def take_global_options(command: click.Command, group: click.Group, name: str) -> None:
    """Give ``command`` (named ``name``) a copy of each of the group's options that applies to
    it, except one it has of its own (``train --device``); given after the command, it
    overrides the group's."""
    if getattr(command, "_takes_global_options", False):
        return
    command._takes_global_options = True
    own = {opt for param in command.params for opt in param.opts}
    for option in group.params:
        if option.name not in GLOBAL_OPTIONS or own & set(option.opts):
            continue
        if name not in APPLIES_TO[option.name]:
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
