"""``qres train``: train a question encoder, or fine-tune a sentence-transformers model;
torch is imported only when it runs."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from qres.training.commands import fail, require_torch, torch_device
from qres.training.commands.train_options import loop_options, method_options

# + qres.training.bowcnn, + transformer (qres.training.finetune_transformer)
ENCODER_CHOICES = ("rcnn", "gru", "lstm", "cnn", "bigru", "bowcnn", "transformer")
DATASET_CHOICES = ("semeval2016", "askubuntu", "stackexchange")  # qres.training.data.DATASETS


@click.command(
    epilog="""\b
Example:
  qres train --dataset semeval2016 --encoder rcnn --vectors glove50 --out runs/rcnn-semeval
  qres export-onnx runs/rcnn-semeval --out models/rcnn-semeval
  qres search "how do i renew my visa" --model models/rcnn-semeval
  qres train --encoder gru --teacher models/minilm --unlabelled questions.tsv --out runs/distil
  qres train --dataset stackexchange --data-dir ../shared/data/stackexchange-travel \\
      --encoder gru --out runs/gru-travel
  qres train --dataset stackexchange --encoder transformer --base minilm --hold-out \\
      --out runs/minilm-travel

\b
The run directory keeps run.json (settings, per-epoch dev metrics), vocab.txt,
last.pt (for --resume) and best.pt (the best dev epoch, which export-onnx
uses)."""
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
    "checkout, else the qres download dir]; stackexchange: the dump's folder (Posts.xml, "
    "PostLinks.xml), trained on its train split of duplicate links.",
)
@click.option(
    "--encoder",
    type=click.Choice(ENCODER_CHOICES),
    default="rcnn",
    show_default=True,
    help="rcnn (gated-decay recurrent CNN, Lei et al. 2016), gru, lstm, cnn, bigru, or "
    "bowcnn (dos Santos et al. 2015: β·cos(IDF-weighted bag of words) + (1-β)·cos(CNN), "
    "trained with log(1+exp(-γΔ))), or transformer (fine-tune the sentence-transformers "
    "model of --base; semeval2016 or stackexchange).",
)
@click.option(
    "--base",
    callback=lambda ctx, param, value: _base_model(value),
    help="transformer: the sentence-transformers model directory to fine-tune, or minilm for "
    "the packaged all-MiniLM-L6-v2 (1 epoch, lr 2e-5, batch 16 unless given; no dev set "
    "read); then `qres import-encoder sentence-transformers OUT --out MODEL_DIR`.",
)
@click.option(
    "--hold-out",
    is_flag=True,
    help="transformer on stackexchange: keep the newest tenth of the train split out of "
    "fine-tuning, for `qres tune-fusion --dataset stackexchange --held-out` (a fusion fitted "
    "on the queries an encoder was trained on trusts its cosine far too much).",
)
@click.option(
    "--hidden",
    type=click.IntRange(min=1),
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
    type=click.IntRange(min=0),
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
@loop_options
@method_options
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
    callback=torch_device,
    help="auto (CUDA when available, else CPU), cpu, cuda, cuda:1, ...",
)
@click.option(
    "--precision",
    type=click.Choice(["fp32", "bf16", "fp16"]),
    default="fp32",
    show_default=True,
    help="bf16 or fp16: mixed precision (autocast) on a CUDA device; the CPU trains in fp32.",
)
def train(out_dir: Path, resume: bool, base: Path | None, hold_out: bool, **options) -> None:
    """Train a question encoder with the max-margin loss, early-stopped on dev MAP."""
    require_torch()
    if hold_out and (options["encoder"], options["dataset"]) != ("transformer", "stackexchange"):
        fail("--hold-out is for --encoder transformer --dataset stackexchange")
    if options["precision"] != "fp32" and options["encoder"] in ("transformer", "bowcnn"):
        fail(f"--precision {options['precision']}: for the rcnn, gru, lstm, cnn, bigru encoders")
    if options["encoder"] == "transformer":
        _finetune_transformer(out_dir, base, options, hold_out)
        return
    from rich.console import Console

    from qres.corpus.readers import CorpusError
    from qres.training.config import TrainConfig, TrainError
    from qres.training.rundir import history_table, run_summary
    from qres.training.train import train as run_training
    from qres.training.vectors import VectorsError

    console = Console(stderr=True)
    try:
        config = TrainConfig.from_options(options)
        run = run_training(config, out_dir, resume=resume, console=console)
    except (TrainError, CorpusError, VectorsError, ValueError) as err:
        fail(str(err))
    except KeyboardInterrupt:
        console.print(f"interrupted: the last finished epoch is kept in {out_dir} (--resume)")
        sys.exit(130)
    console.print(history_table(run))
    for line in run_summary(run, out_dir):
        console.print(line)


def _base_model(value: str | None) -> Path | None:
    """--base: a sentence-transformers directory, or minilm: the packaged all-MiniLM-L6-v2."""
    if value == "minilm":
        from qres.training.default_set import BuildError, minilm_source

        try:
            return minilm_source()
        except BuildError as err:
            raise click.BadParameter(str(err)) from None
    if value is not None and not Path(value).is_dir():
        raise click.BadParameter(f"{value}: not a model directory (or minilm)")
    return None if value is None else Path(value)


def _finetune_transformer(out_dir: Path, base: Path | None, options: dict, hold_out: bool) -> None:
    """``--encoder transformer``: in-batch + hard-negative fine-tuning of --base."""
    if base is None:
        fail("--encoder transformer needs --base DIR (a sentence-transformers model)")
    if options["dataset"] not in ("semeval2016", "stackexchange"):
        fail("--encoder transformer trains on semeval2016 or stackexchange")
    from qres.corpus.readers import CorpusError
    from qres.training.finetune_transformer import finetune
    from qres.training.import_encoder import EncoderImportError

    given = click.get_current_context().get_parameter_source
    explicit = {
        name: options[name]
        for name in ("epochs", "lr", "batch_size", "seed")
        if given(name) is not click.core.ParameterSource.DEFAULT
    }
    try:
        record = finetune(
            base,
            out_dir,
            options.get("data_dir"),
            device=options["device"],
            dataset=options["dataset"],
            hold_out=hold_out,
            **explicit,
        )
    except (CorpusError, EncoderImportError) as err:
        fail(str(err))
    click.echo(
        f"fine-tuned {base} on {record['pairs']} pairs in {record['seconds']:.0f}s "
        f"({record['device']}); next: qres import-encoder sentence-transformers {out_dir} "
        f"--out models/{out_dir.name}"
    )
