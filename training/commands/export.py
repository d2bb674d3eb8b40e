"""``qres export-onnx``: a training run's best epoch (or a checkpoint) as a model directory
for serving; torch is imported only when it runs."""

from __future__ import annotations

from pathlib import Path

import click

from qres.training.commands import fail, require_torch


@click.command(
    "export-onnx",
    epilog="""\b
Example:
  qres export-onnx runs/rcnn-semeval --out models/rcnn-semeval

\b
Writes model.onnx (token_ids int64 [batch, length], mask float32
[batch, length] -> vector float32 [batch, dim], L2-normalised), vocab.txt and
model.json (the model card with the fingerprint), after checking onnxruntime
against torch.""",
)
@click.argument("run_dir", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Model directory to write.",
)
def export_onnx(run_dir: Path, out_dir: Path) -> None:
    """Export a training run (its best epoch) or a checkpoint file to ONNX for serving."""
    require_torch()
    from qres.training.config import TrainError
    from qres.training.export import ExportError
    from qres.training.export import export_onnx as run_export
    from qres.training.tags import export_head

    try:
        card = run_export(run_dir, out_dir)
        n_tags = export_head(run_dir, out_dir)
    except (TrainError, ExportError) as err:
        fail(str(err))
    if n_tags:
        click.echo(f"wrote the tag head ({n_tags} tags) for `qres tags --model {out_dir}`")
    click.echo(
        f"wrote {out_dir}: {card['architecture']} dim {card['dim']}, vocab {card['vocab_size']}, "
        f"parity error {card['export']['parity_max_abs_error']:.1e}, "
        f"fingerprint {card['fingerprint'][:12]}"
    )
