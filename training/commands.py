"""``qres train`` and ``qres export-onnx``; torch is imported only when a command runs."""

from __future__ import annotations

import sys
from pathlib import Path

import click

TORCH_MISSING = "torch is not installed: pip install 'qres[train]'"

ENCODER_CHOICES = ("rcnn", "gru", "lstm", "cnn", "bigru")  # training.encoders.ENCODERS
DATASET_CHOICES = ("semeval2016", "askubuntu")  # training.data.DATASETS


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _import_training():
    try:
        import torch  # noqa: F401
    except ImportError:
        _fail(TORCH_MISSING)


@click.command(
    epilog="""\b
Example:
  qres train --dataset semeval2016 --encoder rcnn --vectors glove50 --out runs/rcnn-semeval
  qres export-onnx runs/rcnn-semeval --out models/rcnn-semeval
  qres search "how do i renew my visa" --model models/rcnn-semeval

\b
The run directory keeps run.json (settings, per-epoch dev metrics), vocab.txt,
last.pt (for --resume) and best.pt (the best dev epoch, which export-onnx uses)."""
)
@click.option(
    "--dataset",
    type=click.Choice(DATASET_CHOICES),
    default="semeval2016",
    show_default=True,
    help="Labelled training data and its dev set.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder with the dataset files [default: ../shared/data/<dataset> beside the "
    "checkout, else the qres download dir].",
)
@click.option(
    "--encoder",
    type=click.Choice(ENCODER_CHOICES),
    default="rcnn",
    show_default=True,
    help="rcnn (gated-decay recurrent CNN, Lei et al. 2016), gru, lstm, cnn, bigru.",
)
@click.option(
    "--hidden",
    type=int,
    help="Hidden size [default: the paper's: rcnn 400, gru 280, "
    "lstm 240, cnn 667, bigru 200 per direction].",
)
@click.option(
    "--pooling",
    type=click.Choice(["mean", "max", "last"]),
    help="How token states become one vector [default: max for bigru, else mean].",
)
@click.option(
    "--vectors",
    default="glove50",
    show_default=True,
    help="glove50 (GloVe 6B 50-d, bundled), word2vec (trained on the training "
    "texts), random, or a word2vec/GloVe text file (.txt or .txt.gz).",
)
@click.option(
    "--extra-vocab",
    type=int,
    default=50_000,
    show_default=True,
    help="Also keep this many of the most frequent pre-trained words, so that words unseen "
    "in training still get their vectors.",
)
@click.option(
    "--finetune-embeddings",
    is_flag=True,
    help="Train the word vectors too (they are frozen by default).",
)
@click.option(
    "--separate-fields",
    is_flag=True,
    help="One encoder for titles and another for bodies (default: one shared).",
)
@click.option("--epochs", type=int, default=20, show_default=True, help="At most this many.")
@click.option(
    "--patience",
    type=int,
    default=4,
    show_default=True,
    help="Stop after this many epochs without a better dev MAP.",
)
@click.option(
    "--batch-size",
    type=int,
    default=16,
    show_default=True,
    help="(query, similar question) pairs per step, each with its negatives.",
)
@click.option(
    "--negatives",
    type=int,
    default=20,
    show_default=True,
    help="Negatives per pair, resampled every epoch.",
)
@click.option("--lr", type=float, default=1e-3, show_default=True, help="Adam learning rate.")
@click.option(
    "--margin",
    type=float,
    default=0.2,
    show_default=True,
    help="δ of the max-margin loss on cosine scores.",
)
@click.option("--dropout", type=float, default=0.1, show_default=True)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Same seed, same data and device: same run.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Run directory to create (e.g. runs/rcnn-semeval).",
)
@click.option("--resume", is_flag=True, help="Continue the run in --out from its last epoch.")
@click.option(
    "--device",
    default="auto",
    show_default=True,
    help="auto (CUDA when available, else CPU), cpu, cuda, cuda:1, ...",
)
def train(out_dir: Path, resume: bool, **options) -> None:
    """Train a question encoder with the max-margin loss, early-stopped on dev MAP."""
    _import_training()
    from rich.console import Console

    from qres.corpus import CorpusError
    from training.train import TrainConfig, TrainError, history_table
    from training.train import train as run_training
    from training.vectors import VectorsError

    console = Console(stderr=True)
    settings = {k: v for k, v in options.items() if v is not None}
    settings["data_dir"] = str(settings["data_dir"]) if "data_dir" in settings else None
    try:
        config = TrainConfig(**settings)
        run = run_training(config, out_dir, resume=resume, console=console)
    except (TrainError, CorpusError, VectorsError, ValueError) as err:
        _fail(str(err))
    except KeyboardInterrupt:
        console.print(f"interrupted: the last finished epoch is kept in {out_dir} (--resume)")
        sys.exit(130)
    console.print(history_table(run))
    best = run["dev_metrics"]
    if best:
        console.print(
            f"best epoch {run['best_epoch']}: dev MAP {best['MAP']:.2f}, MRR {best['MRR']:.2f}, "
            f"P@1 {best['P@1']:.2f} in {run['train_seconds']:.0f}s; "
            f"next: qres export-onnx {out_dir} --out models/{out_dir.name}"
        )


@click.command(
    "export-onnx",
    epilog="""\b
Example:
  qres export-onnx runs/rcnn-semeval --out models/rcnn-semeval

\b
Writes model.onnx (token_ids int64 [batch, length], mask float32 [batch, length]
-> vector float32 [batch, dim], L2-normalised), vocab.txt and model.json (the model
card with the fingerprint), after checking onnxruntime against torch.""",
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
    _import_training()
    from training.export import ExportError
    from training.export import export_onnx as run_export
    from training.train import TrainError

    try:
        card = run_export(run_dir, out_dir)
    except (TrainError, ExportError) as err:
        _fail(str(err))
    click.echo(
        f"wrote {out_dir}: {card['architecture']} dim {card['dim']}, vocab {card['vocab_size']}, "
        f"parity error {card['export']['parity_max_abs_error']:.1e}, "
        f"fingerprint {card['fingerprint'][:12]}"
    )
