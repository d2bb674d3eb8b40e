"""The epoch loop every training run shares (``fit``): the epoch's examples, one ``step`` per
batch, dev scoring, early stopping, checkpoints and ``run.json``; and the helpers a step and
the dev scoring use.

Reproducibility: the negatives of epoch e are drawn from ``default_rng([seed, e])`` and the
dropout masks from ``torch.manual_seed(seed * 1000 + e)``, so a run and a resumed run with the
same seed see the same batches and, on the same device, give the same losses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
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

from qres.corpus.readers import Question
from qres.encoders.vocab import Vocab
from qres.training.config import TrainConfig
from qres.training.data import Example, HardNegatives, TrainingData, encode_id_lists, epoch_examples
from qres.training.encoders import QuestionEncoder
from qres.training.rundir import BEST_FILE, LAST_FILE, METRICS, RUN_FILE, save_json


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


def candidate_rows(batch: list[Example], row: dict[str, int]) -> torch.Tensor:
    """[B, 1 + K] row indices: positive first, negatives after (short lists repeat one)."""
    width = max(len(e.negatives) for e in batch)
    rows = []
    for e in batch:
        negatives = e.negatives + [e.negatives[0]] * (width - len(e.negatives))
        rows.append([row[e.positive]] + [row[n] for n in negatives])
    return torch.tensor(rows)


def progress_bar(console: Console, enabled: bool) -> Progress:
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


Step = Callable[[list[Example], np.random.Generator], dict[str, float]]


def fit(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    run: dict,
    state: dict | None,
    config: TrainConfig,
    data: TrainingData,
    out_dir: Path,
    step: Step,
    score_dev: Callable[[], dict],
    console: Console,
    show_progress: bool,
    hard_negatives: HardNegatives | None = None,
    epoch_metrics: Callable[[], dict] = dict,
    extra_states: Callable[[], dict] = dict,
    scored_on: str = "dev",
) -> dict:
    """The epochs of a run: examples, ``step`` per batch (its losses), dev scoring, early
    stopping, checkpoints and ``run.json``; returns the run record. ``scored_on`` names what
    ``score_dev`` scores, for the epoch lines."""
    start_epoch = state["epoch"] + 1 if state is not None else 1
    bad_epochs = state["bad_epochs"] if state is not None else 0
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
        step_rng = np.random.default_rng([config.seed, epoch, 3])  # e.g. domain batches
        model.train()
        steps: list[dict[str, float]] = []
        with progress_bar(console, show_progress) as progress:
            task = progress.add_task(
                f"epoch {epoch}/{config.epochs}", total=len(examples), loss=0.0, rate=0.0
            )
            for start in range(0, len(examples), config.batch_size):
                batch = examples[start : start + config.batch_size]
                steps.append(step(batch, step_rng))
                done = start + len(batch)
                rate = done / max(time.perf_counter() - started, 1e-9)
                mean_loss = float(np.mean([s["loss"] for s in steps]))
                progress.update(task, completed=done, loss=mean_loss, rate=rate)
        train_seconds = time.perf_counter() - started
        metrics = score_dev()
        extra_metrics = epoch_metrics()
        seconds = time.perf_counter() - started
        means = {k: float(np.mean([s[k] for s in steps])) for k in (steps or [{}])[0]}
        record = {
            "epoch": epoch,
            "loss": means.get("loss", 0.0),
            **{m: round(metrics[m], 4) for m in METRICS},
            **{k: round(v, 4) for k, v in means.items() if k != "loss"},
            **extra_metrics,
            "examples_per_s": round(len(examples) / max(train_seconds, 1e-9), 1),
            "seconds": round(seconds, 2),
        }
        run["history"].append(record)
        run["train_seconds"] = round(run["train_seconds"] + seconds, 2)
        extras = extra_states()
        if metrics[config.early_stop] > best:
            best, bad_epochs = metrics[config.early_stop], 0
            run["best_epoch"], run["dev_metrics"] = epoch, {m: record[m] for m in METRICS}
            torch.save(
                {"model": model.state_dict(), "epoch": epoch, "extras": extras},
                out_dir / BEST_FILE,
            )
        else:
            bad_epochs += 1
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": epoch,
                "bad_epochs": bad_epochs,
                "extras": extras,
            },
            out_dir / LAST_FILE,
        )
        save_json(out_dir / RUN_FILE, run)
        if show_progress:
            console.print(_epoch_line(record, seconds, scored_on))
    return run


def _epoch_line(record: dict, seconds: float, scored_on: str = "dev") -> str:
    line = (
        f"epoch {record['epoch']}: loss {record['loss']:.4f}  {scored_on} MAP {record['MAP']:.2f}  "
        f"MRR {record['MRR']:.2f}  P@1 {record['P@1']:.2f}"
    )
    if "tag_MAP" in record:
        line += f"  tags P@5 {record['tag_P@5']:.2f} MAP {record['tag_MAP']:.2f}"
    if "domain_heldout_accuracy" in record:
        line += f"  domain acc {record['domain_heldout_accuracy']:.1f}%"
        line += f" (fresh probe {record['domain_probe_accuracy']:.1f}%)"
    for key in ("target_AUC0.05", "target_MAP"):
        if key in record:
            line += f"  {key} {record[key]:.2f}"
    return line + f"  ({seconds:.0f}s)"
