"""Every ``qres ...`` command line the user is shown, parsed against the real click commands:
the code blocks and inline commands of README.md and docs/*.md, the examples of every
command's ``--help``, and the options named in help texts. An option no command has, a value
a choice does not take, a missing or extra argument fails here, not in a reader's shell."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from qres.cli import cli

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
# A synopsis's alternatives, a|b (written a\\|b in a table), kept in one word.
OR = "\N{BROKEN BAR}"
# What a synopsis stands in for a value: FILE, DIR, N, RUN_A, ... (and "..." for the rest).
PLACEHOLDER = re.compile(r"^([A-Z][A-Z0-9_]*|\.\.\.|[a-z])$")
# Written before qres on a command line: a variable (QRES_API_KEY=... qres serve), time.
PREFIX = re.compile(r"^(\w+=.*|time|env|exec|sudo)$")
OPERATORS = {"&&", "||", ";", "|", "&", "(", ")"}
# Options of other tools the pages show in inline code (pip, pytest, uvicorn, docker, Kibana).
OTHER_TOOLS = {"--no-deps", "--force-reinstall", "--durations", "--no-build-isolation"}


def invocations(line: str) -> list[list[str]]:
    """The argument lists of the ``qres`` commands on a shell line (``.venv/bin/qres`` too),
    after its variables; a line that shlex cannot split has none."""
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
    except ValueError:
        return []
    found, command = [], []
    for token in [*tokens, ";"]:
        if token not in OPERATORS:
            command.append(token)
            continue
        while command and PREFIX.match(command[0]):
            command.pop(0)
        if len(command) > 1 and command[0].endswith("qres") and Path(command[0]).name == "qres":
            found.append(command[1:])
        command = []
    return found


def shell_lines(text: str) -> list[str]:
    """The lines of the page's shell code blocks, continuation lines joined."""
    lines = []
    for language, body in FENCE.findall(text):
        if language not in ("", "bash", "sh"):
            continue
        lines += body.replace("\\\n", " ").splitlines()
    return lines


def inline_commands(text: str) -> list[str]:
    """The inline code spans of the prose (tables included) that run qres."""
    prose = FENCE.sub("", text)
    return [span for span in SPAN.findall(prose) if invocations(_synopsis(span))]


def _synopsis(span: str) -> str:
    """A synopsis as words: ``[--x]`` → ``--x``, ``a\\|b`` → one word of both, ``--x|--y``
    → two words."""
    span = span.replace("\\|", "|").replace("[", " ").replace("]", " ")
    span = re.sub(r"\|(?=-)", " ", span)
    return re.sub(r"(?<=\S)\|(?=\S)", OR, span)


def options_of(command: click.Command, ctx: click.Context) -> dict[str, click.Parameter]:
    named = {opt: p for p in command.get_params(ctx) for opt in (*p.opts, *p.secondary_opts)}
    return {o: p for o, p in named.items() if o.startswith("-")}


def subcommand(args: list[str]) -> tuple[click.Command, click.Context, list[str]]:
    """The command ``args`` runs (after the group's options, parsed), its context and the
    arguments left for it."""
    group_ctx = click.Context(cli, info_name="qres", resilient_parsing=False)
    _, rest, _ = cli.make_parser(group_ctx).parse_args(list(args))
    if not rest:
        raise click.UsageError("no command after qres")
    command = cli.get_command(group_ctx, rest[0])
    if command is None:
        raise click.UsageError(f"no command {rest[0]!r}")
    return command, click.Context(command, info_name=rest[0], parent=group_ctx), rest[1:]


def check_runnable(args: list[str]) -> None:
    """Parse ``args`` as click parses a real command line; values cast to the options' types
    (a path need not exist; a placeholder such as FILE stands for any value)."""
    command, ctx, rest = subcommand(args)
    if "--help" in rest:
        return
    values, extra, _ = command.make_parser(ctx).parse_args(rest)
    if extra:
        raise click.UsageError(f"unexpected extra arguments {extra}")
    for param in command.params:
        value = values.get(param.name)
        if value is None or value is click.core.UNSET:
            if param.required:
                raise click.UsageError(f"missing {param.human_readable_name}")
            continue
        words = value if isinstance(value, list | tuple) else [value]
        if isinstance(param.type, click.Path | click.File) or all(
            isinstance(w, str) and PLACEHOLDER.match(w) for w in words
        ):
            continue
        param.type_cast_value(ctx, value)


def check_synopsis(args: list[str]) -> None:
    """A synopsis (``qres index CORPUS [--model DIR] [--links FILE|--no-links]``): every
    option exists, every literal choice is one the option or argument takes."""
    command: click.Command = cli
    ctx = click.Context(cli, info_name="qres")
    options, arguments = options_of(cli, ctx), []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if PLACEHOLDER.match(word):
            continue
        if word.startswith("-"):
            name, _, attached = word.partition("=")
            if name == "--help":
                continue
            if name not in options:
                raise click.NoSuchOption(name)
            param = options[name]
            if param.is_flag or param.count:
                continue
            value = attached or (args[i] if i < len(args) else "")
            i += 0 if attached else 1
            _check_choice(param, value, ctx)
        elif command is cli:
            command = cli.get_command(ctx, word)
            if command is None:
                raise click.UsageError(f"no command {word!r}")
            ctx = click.Context(command, info_name=word, parent=ctx)
            options = options_of(command, ctx)
            arguments = [p for p in command.params if isinstance(p, click.Argument)]
        elif arguments:
            argument = arguments[0] if arguments[0].nargs == -1 else arguments.pop(0)
            _check_choice(argument, word, ctx)
        else:
            raise click.UsageError(f"unexpected argument {word!r}")


def _check_choice(param: click.Parameter, value: str, ctx: click.Context) -> None:
    if not isinstance(param.type, click.Choice):
        return
    for choice in value.split(OR):
        if choice and not PLACEHOLDER.match(choice) and choice not in param.type.choices:
            raise click.BadParameter(f"{choice!r} is not one of {param.type.choices}", ctx, param)


def all_commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(cli, info_name="qres")
    return [(name, cli.get_command(ctx, name)) for name in cli.list_commands(ctx)]


def help_examples(text: str) -> list[str]:
    """The command lines of a help text's Example / Typical session block (indented)."""
    lines = text.replace("\\\n", " ").splitlines()
    return [line.strip() for line in lines if re.match(r"\s+qres ", line)]


def help_texts() -> list[tuple[str, click.Command, str]]:
    """(name, command, text) of the group's help, each command's and each option's."""
    found = [("qres", cli, cli.help or "")]
    for name, command in all_commands():
        found.append((name, command, f"{command.help or ''}\n{command.epilog or ''}"))
        found += [(name, command, p.help or "") for p in command.params if hasattr(p, "help")]
    found += [("qres", cli, p.help or "") for p in cli.params if hasattr(p, "help")]
    return found


def problems_on(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    problems = []
    for line in shell_lines(text):
        if "..." in line or "[" in line:  # a synopsis in a code block
            problems += [
                p for a in invocations(_synopsis(line)) for p in _failure(check_synopsis, a, line)
            ]
            continue
        for args in invocations(line):
            problems += _failure(check_runnable, args, line)
    for span in inline_commands(text):
        for args in invocations(_synopsis(span)):
            problems += _failure(check_synopsis, args, span)
    return problems


def _failure(check, args: list[str], shown: str) -> list[str]:
    try:
        check(args)
    except click.ClickException as err:
        return [f"{shown!r}: {err.format_message()}"]
    return []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_qres_command_on_the_page_parses(page):
    problems = problems_on(page)
    assert not problems, f"{page.relative_to(REPO)}:\n" + "\n".join(problems)


def test_every_help_example_parses():
    problems, examples = [], 0
    for name, _, text in help_texts():
        for line in help_examples(text):
            for args in invocations(line):
                examples += 1
                problems += _failure(check_runnable, args, f"{name} --help: {line}")
        for span in SPAN.findall(text):
            for args in invocations(_synopsis(span)):
                problems += _failure(check_synopsis, args, f"{name} --help: {span}")
    assert examples >= len(all_commands())  # the examples are found at all
    assert not problems, "\n".join(problems)


def every_option() -> set[str]:
    """Every option of every qres command (and of the group), and --help."""
    every = {"--help"}
    for name, command in [("qres", cli), *all_commands()]:
        every |= set(options_of(command, click.Context(command, info_name=name)))
    return every


def test_every_option_a_help_text_names_exists():
    """``--skip-bad`` in ``qres index --help``, or ``--model-set`` in ``qres adapt --help``
    (the option of the command that uses what adapt makes), is an option of some command;
    one inside a quoted ``qres other ...`` command is checked against that command above."""
    every, problems = every_option(), []
    for name, _, text in help_texts():
        prose = SPAN.sub("", text.replace("\\\n", " "))
        for example in help_examples(text):  # checked against their own commands above
            prose = prose.replace(example, "")
        for option in re.findall(r"(?<![\w`-])--[a-z][\w-]*", prose):
            if option not in every:
                problems.append(f"{name} --help names {option}, which no qres command has")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_option_in_inline_code_is_a_qres_option(page):
    """An option shown alone (`--no-links`) belongs to some qres command."""
    every = every_option() | OTHER_TOOLS
    prose = FENCE.sub("", page.read_text(encoding="utf-8"))
    unknown = {
        option
        for span in SPAN.findall(prose)
        if span.startswith("-")
        for option in re.findall(r"(?<![\w-])--?[a-z][\w-]*", span)
        if option not in every and option.startswith("--")
    }
    assert not unknown, f"{page.relative_to(REPO)} shows options no qres command has: {unknown}"


@pytest.mark.parametrize(
    "line",
    [
        "qres index Posts.xml --no-such-option",
        "qres search boot --mode fuzzy",  # not one of its choices
        "qres index",  # CORPUS missing
        "qres search",  # TEXT missing
        "qres serch boot",
        "qres --nope search x",
        "qres serve --candidates many",
    ],
)
def test_a_wrong_command_line_is_caught(line):
    (args,) = invocations(line)
    assert _failure(check_runnable, args, line)


@pytest.mark.parametrize(
    "span",
    [
        "qres index CORPUS [--model DIR] [--modle-set default]",
        "qres evaluate --dataset askubuntu\\|semeval2016\\|quora",
        "qres download askubuntu\\|mnist",
    ],
)
def test_a_wrong_synopsis_is_caught(span):
    (args,) = invocations(_synopsis(span))
    assert _failure(check_synopsis, args, span)


def test_command_lines_are_found_where_the_pages_show_them():
    line = "QRES_API_KEY=s3 .venv/bin/qres serve --port 8000  # then open it && qres info"
    assert invocations(line) == [["serve", "--port", "8000"]]
    assert invocations("pip install -e . && .venv/bin/qres index a.tsv") == [["index", "a.tsv"]]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = [args for line in shell_lines(readme) for args in invocations(line)]
    assert ["import-encoder", "minilm"] in found and ["serve", "--port", "8000"] in found
    assert "qres compact" in inline_commands((REPO / "docs" / "cli.md").read_text())


def test_every_help_text_fits_an_80_column_terminal():
    """Prose a ``\\b`` block keeps as written is wrapped by hand; only the example command
    lines, there to be copied whole, may run longer."""
    long = []
    for name, command in [("qres", cli), *all_commands()]:
        ctx = click.Context(command, info_name=name, terminal_width=80, max_content_width=80)
        in_example = False
        for line in command.get_help(ctx).splitlines():
            in_example = line.rstrip().endswith(("Example:", "Examples:", "Typical session:")) or (
                in_example and bool(line.strip())
            )
            if len(line) > 80 and not in_example:
                long.append(f"qres {name} --help: {line.strip()}")
    assert not long, "\n".join(long)
