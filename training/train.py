"""Train a question encoder with the max-margin loss, early-stopped on dev MAP.

A run directory holds:

* ``run.json`` — the settings (``TrainConfig``, ``EncoderConfig``), data files, vector source,
  per-epoch history and best dev metrics; rewritten after every epoch;
* ``vocab.txt`` — the vocabulary (``qres.vocab``);
* ``last.pt`` — model, optimiser and early-stopping state after the last finished epoch
  (what ``resume`` continues from); ``best.pt`` — the model of the best dev epoch.

Reproducibility: the negatives of epoch e are drawn from ``default_rng([seed, e])`` and the
dropout masks from ``torch.manual_seed(seed * 1000 + e)``, so a run and a resumed run with the
same seed see the same batches and, on the same device, give the same losses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from qres.corpus import Question
from qres.text import BODY_MAX_TOKENS, TITLE_MAX_TOKENS
from qres.vocab import Vocab
from training.data import (
    Example,
    HardNegatives,
    TokenizedQuestions,
    TrainingData,
    encode_id_lists,
    epoch_examples,
    load_dataset,
    vocab_sentences,
)
from training.encoders import EncoderConfig, QuestionEncoder
from training.evaluate import evaluate
from training.losses import DEFAULT_MARGIN, max_margin_loss
from training.vectors import build_vocab, load_vectors

RUN_FILE, VOCAB_FILE, LAST_FILE, BEST_FILE = "run.json", "vocab.txt", "last.pt", "best.pt"
METRICS = ("MAP", "MRR", "P@1", "P@5")


class TrainError(RuntimeError):
    """A problem with the run directory or settings; one sentence."""


@dataclass
class TrainConfig:
    dataset: str = "semeval2016"
    data_dir: str | None = None
    encoder: str = "rcnn"
    hidden: int | None = None  # None = the paper's size for the encoder
    pooling: str | None = None
    ngram: int = 2
    separate_fields: bool = False
    vectors: str = "glove50"  # glove50 | word2vec | random | path to a vectors file
    finetune_embeddings: bool = False
    learned_unk: bool = True
    min_count: int = 1
    extra_vocab: int = 50_000  # most frequent pre-trained words kept beyond the training words
    random_dim: int = 100  # embedding size when vectors == "random"
    epochs: int = 20
    batch_size: int = 16  # (query, positive) pairs per step
    negatives: int = 20
    lr: float = 1e-3
    margin: float = DEFAULT_MARGIN
    dropout: float = 0.1
    max_grad_norm: float = 5.0
    patience: int = 4  # epochs without a better dev score before stopping
    early_stop: str = "MAP"  # or "MRR"
    seed: int = 0
    device: str = "auto"
    title_max: int = TITLE_MAX_TOKENS
    body_max: int = BODY_MAX_TOKENS

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise TrainError(f"device {name!r} asked for, but CUDA is not available")
    return torch.device(name)


def torch_encoder(
    model: QuestionEncoder, vocab: Vocab, device, title_max: int, body_max: int, batch_size=256
):
    """``questions → unit vectors`` with the torch model (eval mode, no gradients)."""

    def encode(questions: Sequence[Question]) -> np.ndarray:
        model.eval()
        pairs = [vocab.encode_question(q.title, q.body, title_max, body_max) for q in questions]
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][1]))
        out = np.zeros((len(pairs), model.config.output_dim), dtype=np.float32)
        with torch.no_grad():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                tensors = encode_id_lists([pairs[i] for i in rows], device)
                out[rows] = model(*tensors).cpu().numpy()
        return out

    return encode


def _candidate_rows(batch: list[Example], row: dict[str, int]) -> torch.Tensor:
    """[B, 1 + K] row indices: positive first, negatives after (short lists repeat one)."""
    width = max(len(e.negatives) for e in batch)
    rows = []
    for e in batch:
        negatives = e.negatives + [e.negatives[0]] * (width - len(e.negatives))
        rows.append([row[e.positive]] + [row[n] for n in negatives])
    return torch.tensor(rows)


def train_step(model, optimizer, batch, tokenized, device, config: TrainConfig) -> float:
    ids = list(dict.fromkeys(i for e in batch for i in (e.query, e.positive, *e.negatives)))
    row = {qid: n for n, qid in enumerate(ids)}
    vectors = model(*tokenized.batch(ids, device))
    queries = vectors[torch.tensor([row[e.query] for e in batch], device=device)]
    candidates = vectors[_candidate_rows(batch, row).to(device)]
    loss = max_margin_loss(queries, candidates, config.margin)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    optimizer.step()
    return loss.item()


def _progress(console: Console, enabled: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f}"),
        TextColumn("{task.fields[rate]:.0f} ex/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
        transient=True,
    )


def _save_json(path: Path, value: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _new_run(config: TrainConfig, data: TrainingData, device) -> tuple:
    """A fresh model, its vocabulary and run record (vectors loaded, vocabulary built)."""
    torch.manual_seed(config.seed)
    sentences = vocab_sentences(data)
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


def train(
    config: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    data: TrainingData | None = None,
    hard_negatives: HardNegatives | None = None,
    console: Console | None = None,
    show_progress: bool = True,
) -> dict:
    """Train (or resume) a run in ``out_dir``; returns the run record (``run.json``)."""
    out_dir = Path(out_dir)
    console = console or Console(stderr=True)
    last_path = out_dir / LAST_FILE
    if resume and not last_path.exists():
        raise TrainError(f"{out_dir}: nothing to resume (no {LAST_FILE})")
    if not resume and last_path.exists():
        raise TrainError(f"{out_dir} already holds a run: pass --resume or choose another --out")
    device = resolve_device(config.device)
    if resume:
        run = json.loads((out_dir / RUN_FILE).read_text(encoding="utf-8"))
        epochs = config.epochs
        config = TrainConfig.from_dict(run["train"])
        config.epochs = max(epochs, config.epochs)
        run["train"]["epochs"] = config.epochs
    data = data or load_dataset(config.dataset, config.data_dir)
    if resume:
        vocab = Vocab.load(out_dir / VOCAB_FILE)
        model = QuestionEncoder(EncoderConfig(**run["encoder"]))
        state = torch.load(last_path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
    else:
        model, vocab, run = _new_run(config, data, device)
        out_dir.mkdir(parents=True, exist_ok=True)
        vocab.save(out_dir / VOCAB_FILE)
        state = None
    model = model.to(device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=config.lr)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
    start_epoch = state["epoch"] + 1 if state is not None else 1
    bad_epochs = state["bad_epochs"] if state is not None else 0
    tokenized = TokenizedQuestions(data.questions, vocab, config.title_max, config.body_max)
    encode = torch_encoder(model, vocab, device, config.title_max, config.body_max)
    hard_cache: dict[str, list[str]] = {}
    best = run["dev_metrics"].get(config.early_stop, -1.0)

    for epoch in range(start_epoch, config.epochs + 1):
        if bad_epochs >= config.patience:
            break
        started = time.perf_counter()
        rng = np.random.default_rng([config.seed, epoch])
        torch.manual_seed(config.seed * 1000 + epoch)
        examples = [
            e
            for e in epoch_examples(data, rng, config.negatives, hard_negatives, hard_cache)
            if e.negatives
        ]
        model.train()
        losses: list[float] = []
        with _progress(console, show_progress) as progress:
            task = progress.add_task(
                f"epoch {epoch}/{config.epochs}", total=len(examples), loss=0.0, rate=0.0
            )
            for start in range(0, len(examples), config.batch_size):
                batch = examples[start : start + config.batch_size]
                losses.append(train_step(model, optimizer, batch, tokenized, device, config))
                done = start + len(batch)
                rate = done / max(time.perf_counter() - started, 1e-9)
                progress.update(task, completed=done, loss=float(np.mean(losses)), rate=rate)
        train_seconds = time.perf_counter() - started
        metrics = evaluate(data.dev, data.questions, encode, data.skip_dev_without_relevant)
        seconds = time.perf_counter() - started
        record = {
            "epoch": epoch,
            "loss": float(np.mean(losses)) if losses else 0.0,
            **{m: round(metrics[m], 4) for m in METRICS},
            "examples_per_s": round(len(examples) / max(train_seconds, 1e-9), 1),
            "seconds": round(seconds, 2),
        }
        run["history"].append(record)
        run["train_seconds"] = round(run["train_seconds"] + seconds, 2)
        if metrics[config.early_stop] > best:
            best, bad_epochs = metrics[config.early_stop], 0
            run["best_epoch"], run["dev_metrics"] = epoch, {m: record[m] for m in METRICS}
            torch.save({"model": model.state_dict(), "epoch": epoch}, out_dir / BEST_FILE)
        else:
            bad_epochs += 1
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": epoch,
                "bad_epochs": bad_epochs,
            },
            last_path,
        )
        _save_json(out_dir / RUN_FILE, run)
        if show_progress:
            console.print(
                f"epoch {epoch}: loss {record['loss']:.4f}  dev MAP {record['MAP']:.2f}  "
                f"MRR {record['MRR']:.2f}  P@1 {record['P@1']:.2f}  ({seconds:.0f}s)"
            )
    return run


def history_table(run: dict) -> Table:
    """Dev metrics per epoch, the best epoch marked."""
    table = Table(title=f"{run['encoder']['kind']} on {run['training']['dataset']} (dev)")
    for column in ("epoch", "loss", *METRICS, "ex/s", "s"):
        table.add_column(column, justify="right")
    for r in run["history"]:
        mark = " *" if r["epoch"] == run["best_epoch"] else ""
        table.add_row(
            f"{r['epoch']}{mark}",
            f"{r['loss']:.4f}",
            *(f"{r[m]:.2f}" for m in METRICS),
            f"{r['examples_per_s']:.0f}",
            f"{r['seconds']:.0f}",
        )
    return table


def load_trained(source: str | Path) -> tuple[QuestionEncoder, Vocab, dict]:
    """The model, vocabulary and run record of a run directory (best epoch) or checkpoint."""
    source = Path(source)
    if source.is_dir():
        run_dir = source
        checkpoint = source / BEST_FILE if (source / BEST_FILE).exists() else source / LAST_FILE
    else:
        run_dir, checkpoint = source.parent, source
    for path in (run_dir / RUN_FILE, run_dir / VOCAB_FILE, checkpoint):
        if not path.exists():
            raise TrainError(f"{path}: not found (is {run_dir} a training run directory?)")
    try:
        run = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
        model = QuestionEncoder(EncoderConfig(**run["encoder"]))
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        raise TrainError(f"{run_dir}: cannot load the run ({str(err).splitlines()[0]})") from None
    return model.eval(), Vocab.load(run_dir / VOCAB_FILE), run
