"""A training run's directory: its files, the run record (``run.json``), opening a run to start
or resume, and loading what it trained.

* ``run.json`` — the settings (``TrainConfig``, ``EncoderConfig``), data files, vector source,
  per-epoch history and best dev metrics; rewritten after every epoch;
* ``vocab.txt`` — the vocabulary (``qres.encoders.vocab``);
* ``last.pt`` — model, optimiser and early-stopping state after the last finished epoch
  (what ``resume`` continues from); ``best.pt`` — the model of the best dev epoch;
* ``pretrained.pt`` — the encoder after pre-training, before fine-tuning (when pre-trained).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch
from rich.table import Table

from qres.encoders.vocab import Vocab
from qres.training.config import TrainConfig, TrainError
from qres.training.data import TrainingData, vocab_sentences
from qres.training.encoders import EncoderConfig, QuestionEncoder
from qres.training.vectors import build_vocab, load_vectors

RUN_FILE, VOCAB_FILE, LAST_FILE, BEST_FILE = "run.json", "vocab.txt", "last.pt", "best.pt"
PRETRAINED_FILE = "pretrained.pt"  # the encoder after pre-training, before fine-tuning
METRICS = ("MAP", "MRR", "P@1", "P@5")


def save_json(path: Path, value: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def new_run(config: TrainConfig, data: TrainingData, device, extra_sentences=()) -> tuple:
    """A fresh model, its vocabulary and run record (vectors loaded, vocabulary built).

    ``extra_sentences`` (e.g. the unlabelled target domain's) also enter the vocabulary.
    """
    torch.manual_seed(config.seed)
    sentences = vocab_sentences(data) + list(extra_sentences)
    vectors = load_vectors(config.vectors, sentences, config.seed, config.extra_vocab)
    vocab, table = build_vocab(
        sentences,
        vectors,
        min_count=config.min_count,
        finetune=config.finetune_embeddings,
        random_dim=config.random_dim,
        seed=config.seed,
    )
    encoder_config = EncoderConfig(
        kind=config.encoder,
        vocab_size=len(vocab),
        embedding_dim=table.shape[1],
        hidden=config.hidden,
        pooling=config.pooling,
        ngram=config.ngram,
        dropout=config.dropout,
        separate_fields=config.separate_fields,
        finetune_embeddings=config.finetune_embeddings or vectors is None,
        learned_unk=config.learned_unk,
    )
    model = QuestionEncoder(encoder_config, table)
    run = {
        "train": asdict(config),
        "encoder": encoder_config.to_dict(),
        "training": {
            "dataset": data.name,
            "files": data.files,
            "train_queries": len(data.train),
            "positive_pairs": sum(len(q.positives) for q in data.train),
            "dev_queries": len(data.dev),
            "vectors": vectors.source if vectors is not None else "random",
            "vocab_size": len(vocab),
        },
        "title_max": config.title_max,
        "body_max": config.body_max,
        "history": [],
        "best_epoch": None,
        "dev_metrics": {},
        "train_seconds": 0.0,
        "device": str(device),
    }
    return model, vocab, run


def open_run(config: TrainConfig, out_dir: Path, resume: bool) -> tuple[TrainConfig, dict | None]:
    """Check ``out_dir`` against ``resume``; when resuming, the saved settings (with the
    epochs raised to ``config.epochs``) and the run record."""
    last_path = out_dir / LAST_FILE
    if resume and not last_path.exists():
        raise TrainError(f"{out_dir}: nothing to resume (no {LAST_FILE})")
    if not resume and last_path.exists():
        raise TrainError(f"{out_dir} already holds a run: pass --resume or choose another --out")
    if not resume:
        return config, None
    run = json.loads((out_dir / RUN_FILE).read_text(encoding="utf-8"))
    epochs = config.epochs
    config = TrainConfig.from_dict(run["train"])
    config.epochs = max(epochs, config.epochs)
    run["train"]["epochs"] = config.epochs
    return config, run


def run_dir_and_checkpoint(source: str | Path) -> tuple[Path, Path]:
    """A run directory (its best epoch, else its last) or a checkpoint file in one."""
    source = Path(source)
    if source.is_dir():
        best = source / BEST_FILE
        return source, best if best.exists() else source / LAST_FILE
    return source.parent, source


OPTIONAL_COLUMNS = {  # shown when the run has them
    "tag_MAP": "tag MAP",
    "domain_heldout_accuracy": "domain acc",
    "domain_probe_accuracy": "probe acc",
    "target_AUC0.05": "target AUC.05",
    "target_MAP": "target MAP",
}


def history_table(run: dict) -> Table:
    """Dev metrics per epoch, the best epoch marked."""
    scored_on = run["training"].get("scored_on", "dev")
    table = Table(title=f"{run['train']['encoder']} on {run['training']['dataset']} ({scored_on})")
    history = run["history"]
    optional = [k for k in OPTIONAL_COLUMNS if any(k in r for r in history)]
    for column in ("epoch", "loss", *METRICS, *(OPTIONAL_COLUMNS[k] for k in optional)):
        table.add_column(column, justify="right")
    table.add_column("ex/s", justify="right")
    table.add_column("s", justify="right")
    for r in history:
        mark = " *" if r["epoch"] == run["best_epoch"] else ""
        table.add_row(
            f"{r['epoch']}{mark}",
            f"{r['loss']:.4f}",
            *(f"{r[m]:.2f}" for m in METRICS),
            *(f"{r[k]:.2f}" if k in r else "" for k in optional),
            f"{r['examples_per_s']:.0f}",
            f"{r['seconds']:.0f}",
        )
    return table


def run_summary(run: dict, out_dir: Path) -> list[str]:
    """What a finished run gave, in sentences: pre-training and tag prediction next to their
    references, then the best epoch and the next command."""
    lines = []
    pre = run.get("pretrain")
    if pre and pre.get("history"):
        before, after = pre["dev_before_pretraining"], pre.get("dev_after_pretraining", {})
        ppl = pre["history"][-1]["heldout_perplexity"]
        lines.append(
            f"pre-training: held-out perplexity {ppl:.1f}; dev MAP {before['MAP']:.2f} "
            f"(untrained) -> {after.get('MAP', float('nan')):.2f} (pre-trained) -> "
            f"{run['dev_metrics'].get('MAP', float('nan')):.2f} (fine-tuned)"
        )
    base = run.get("tag_baseline")
    best = next((r for r in run["history"] if r["epoch"] == run["best_epoch"]), None)
    if base and best and "tag_MAP" in best:
        lines.append(
            f"tags (held-out, {base['questions']} questions): head P@5 {best['tag_P@5']:.2f} "
            f"R@5 {best['tag_R@5']:.2f} MAP {best['tag_MAP']:.2f}; TF-IDF logistic regression "
            f"P@5 {base['P@5']:.2f} R@5 {base['R@5']:.2f} MAP {base['MAP']:.2f}"
        )
    best = run["dev_metrics"]
    if best:
        scored_on = run["training"].get("scored_on", "dev")
        lines.append(
            f"best epoch {run['best_epoch']}: {scored_on} MAP {best['MAP']:.2f}, "
            f"MRR {best['MRR']:.2f}, "
            f"P@1 {best['P@1']:.2f} in {run['train_seconds']:.0f}s; "
            f"next: qres export-onnx {out_dir} --out models/{out_dir.name}"
        )
    return lines


def checked_run(source: str | Path) -> tuple[Path, Path]:
    """:func:`run_dir_and_checkpoint`, once the run's files are there: a checkpoint file is
    exported from its run directory, with that run's run.json and vocab.txt beside it."""
    run_dir, checkpoint = run_dir_and_checkpoint(source)
    for path in (run_dir / RUN_FILE, run_dir / VOCAB_FILE, checkpoint):
        if path.exists():
            continue
        if Path(source).is_file():
            raise TrainError(
                f"{source}: a checkpoint is read from its training run directory, with its "
                f"{path.name} beside it; {run_dir} has none"
            )
        raise TrainError(f"{path}: not found (is {run_dir} a training run directory?)")
    return run_dir, checkpoint


def read_checkpoint(checkpoint: Path) -> dict:
    """A checkpoint's saved state, or a one-line error naming the file."""
    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    except Exception as err:  # torch.load raises whatever unpickling a foreign file raises
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise TrainError(f"{checkpoint}: not a qres training checkpoint ({why})") from None
    if not isinstance(state, dict) or "model" not in state:
        raise TrainError(f"{checkpoint}: not a qres training checkpoint (no model state)")
    return state


def load_trained(source: str | Path) -> tuple[QuestionEncoder, Vocab, dict]:
    """The model, vocabulary and run record of a run directory (best epoch) or checkpoint."""
    run_dir, checkpoint = checked_run(source)
    try:
        run = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
        model = QuestionEncoder(EncoderConfig(**run["encoder"]))
        model.load_state_dict(read_checkpoint(checkpoint)["model"])
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        raise TrainError(f"{run_dir}: cannot load the run ({str(err).splitlines()[0]})") from None
    return model.eval(), Vocab.load(run_dir / VOCAB_FILE), run
