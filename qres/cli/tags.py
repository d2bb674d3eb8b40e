"""``qres tags``: tags suggested for a question by a model trained with ``--tags``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from qres.corpus.readers import Question
from qres.encoders.tag_head import TagPredictor


@click.command(
    "tags",
    epilog="""\b
Example:
  qres train --tags --encoder gru --out runs/gru-tags
  qres export-onnx runs/gru-tags --out models/gru-tags
  qres tags "best place to renew my residence permit" --model models/gru-tags""",
)
@click.argument("text")
@click.option(
    "--model",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Model directory exported from a `qres train --tags` run (has tags.npz).",
)
@click.option("--body", default="", help="The question's body, if TEXT is its title.")
@click.option(
    "-k",
    "k",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="How many tags to suggest, the most probable first.",
)
@click.option("--json", "as_json_here", is_flag=True, help="Machine-readable JSON output.")
@click.pass_context
def tags_command(ctx, text: str, model: Path, body: str, k: int, as_json_here: bool) -> None:
    """Suggest tags for a question, with the tag head's probabilities."""
    suggestions = TagPredictor.load(model).suggest(Question("query", text, body), k)
    if as_json_here or getattr(ctx.obj, "as_json", False):
        click.echo(json.dumps([{"tag": t, "score": round(s, 4)} for t, s in suggestions]))
        return
    for tag, score in suggestions:
        click.echo(f"{score:.3f}  {tag}")
