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
from collections.abc import Callable, Sequence
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
from qres.tags import TAG_METRICS
from qres.text import BODY_MAX_TOKENS, TITLE_MAX_TOKENS
from qres.training.adapt import (
    DomainClassifier,
    TargetDomain,
    classifier_accuracy,
    heldout_split,
    load_target,
    probe_accuracy,
    target_auc,
)
from qres.training.data import (
    Example,
    HardNegatives,
    TokenizedQuestions,
    TrainingData,
    encode_id_lists,
    epoch_examples,
    load_dataset,
    question_sentences,
    vocab_sentences,
)
from qres.training.encoders import EncoderConfig, QuestionEncoder
from qres.training.evaluate import evaluate
from qres.training.losses import DEFAULT_MARGIN, max_margin_loss
from qres.training.pretrain import pretrain
from qres.training.tags import TagHead, head_metrics, tag_labels, tagged_split, tfidf_baseline
from qres.training.vectors import build_vocab, load_vectors
from qres.vocab import Vocab

RUN_FILE, VOCAB_FILE, LAST_FILE, BEST_FILE = "run.json", "vocab.txt", "last.pt", "best.pt"
PRETRAINED_FILE = "pretrained.pt"  # the encoder after pre-training, before fine-tuning
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
    # Encoder-decoder pre-training (Lei et al. 2016, Sec. 4.2): epochs before fine-tuning.
    pretrain_epochs: int = 0
    pretrain_vocab: int = 10_000  # decoder output words; rarer ones are predicted as <unk>
    # Adversarial domain adaptation (gradient reversal): an unlabelled target corpus.
    adapt_to: str | None = None
    adapt_lambda: float = 0.1  # scale of the reversed domain-classifier gradient
    domain_batch: int = 32  # source and target questions per step, each
    # Joint tag prediction: loss = tag_alpha * ranking + tag_beta * tag cross-entropy.
    tags: bool = False
    tag_alpha: float = 1.0
    tag_beta: float = 1.0
    # BOW-CNN (dos Santos et al. 2015): s = bow_beta * cos(bow) + (1 - bow_beta) * cos(cnn),
    # trained with log(1 + exp(-gamma * (s(q, p+) - s(q, p-)))).
    bow_beta: float = 0.5
    gamma: float = 10.0

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


def _new_run(config: TrainConfig, data: TrainingData, device, extra_sentences=()) -> tuple:
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


@dataclass
class Extras:
    """The optional objectives beside the ranking loss, and what they need."""

    tag_head: TagHead | None = None
    tagged: tuple[list[Question], list[Question]] = ([], [])  # (training, held out)
    domain: DomainClassifier | None = None
    target: TargetDomain | None = None
    target_tokens: TokenizedQuestions | None = None
    source_ids: tuple[list[str], list[str]] = ([], [])  # (sampled for training, held out)
    target_ids: tuple[list[str], list[str]] = ([], [])

    def modules(self) -> dict[str, torch.nn.Module]:
        found = {"tags": self.tag_head, "domain": self.domain}
        return {name: m for name, m in found.items() if m is not None}


def _extras(config: TrainConfig, data: TrainingData, target, vocab, encoder_config) -> Extras:
    extras = Extras()
    dim = encoder_config.output_dim
    if config.tags:
        train_tagged, held_tagged = tagged_split(data, config.seed)
        if not train_tagged:
            raise TrainError(f"--tags: no training question of {data.name} has tags")
        extras.tag_head = TagHead(dim, tag_labels(train_tagged))
        extras.tagged = (train_tagged, held_tagged)
    if target is not None:
        extras.domain = DomainClassifier(dim, config.adapt_lambda)
        extras.target = target
        extras.target_tokens = TokenizedQuestions(
            target.questions, vocab, config.title_max, config.body_max
        )
        extras.source_ids = heldout_split(list(data.vocab_ids), config.seed, 1)
        extras.target_ids = heldout_split(sorted(target.questions), config.seed, 2)
    return extras


def train_step(
    model, optimizer, batch, tokenized, device, config: TrainConfig, extras=None, rng=None
) -> dict[str, float]:
    """One optimiser step; the losses (and the domain classifier's accuracy) of the batch."""
    ids = list(dict.fromkeys(i for e in batch for i in (e.query, e.positive, *e.negatives)))
    row = {qid: n for n, qid in enumerate(ids)}
    vectors = model(*tokenized.batch(ids, device))
    queries = vectors[torch.tensor([row[e.query] for e in batch], device=device)]
    candidates = vectors[_candidate_rows(batch, row).to(device)]
    ranking = max_margin_loss(queries, candidates, config.margin)
    loss, out = ranking, {"loss": ranking.item()}
    if extras is not None and extras.tag_head is not None:
        tag_loss = extras.tag_head.loss(vectors, [tokenized.questions[i] for i in ids])
        loss = config.tag_alpha * ranking + config.tag_beta * tag_loss
        out["tag_loss"] = tag_loss.item()
    if extras is not None and extras.domain is not None:
        source = _sample_ids(extras.source_ids[0], config.domain_batch, rng)
        target = _sample_ids(extras.target_ids[0], config.domain_batch, rng)
        domain_loss, accuracy = extras.domain.loss(
            model(*tokenized.batch(source, device)),
            model(*extras.target_tokens.batch(target, device)),
        )
        loss = loss + domain_loss  # the reversal layer scales the encoder's share by -λ
        out["domain_loss"], out["domain_accuracy"] = domain_loss.item(), 100 * accuracy
    optimizer.zero_grad()
    loss.backward()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
    optimizer.step()
    return out


def _sample_ids(ids: list[str], k: int, rng: np.random.Generator) -> list[str]:
    return [ids[i] for i in rng.choice(len(ids), size=min(k, len(ids)), replace=False)]


def _extra_metrics(extras: Extras, encode, tokenized) -> dict:
    """Held-out tag metrics, domain-classifier accuracy and target AUC/MAP after an epoch."""
    out: dict = {}
    if extras.tag_head is not None and extras.tagged[1]:
        extras.tag_head.eval()
        held = extras.tagged[1]
        tags = head_metrics(extras.tag_head, encode(held), held)
        out.update({f"tag_{m}": round(tags[m], 2) for m in TAG_METRICS})
        extras.tag_head.train()
    if extras.domain is not None:
        extras.domain.eval()
        source = encode([tokenized.questions[i] for i in extras.source_ids[1]])
        target = encode([extras.target.questions[i] for i in extras.target_ids[1]])
        device = next(extras.domain.parameters()).device
        out["domain_heldout_accuracy"] = round(
            classifier_accuracy(
                extras.domain,
                torch.from_numpy(source).to(device),
                torch.from_numpy(target).to(device),
            ),
            2,
        )
        out["domain_probe_accuracy"] = round(probe_accuracy(source, target), 2)
        extras.domain.train()
        if extras.target.pairs:
            ids = sorted({i for q in extras.target.pairs for i in (q.id, *q.candidates)})
            vectors = dict(zip(ids, encode([extras.target.questions[i] for i in ids]), strict=True))
            out["target_AUC0.05"] = round(target_auc(extras.target, vectors), 2)
        if extras.target.ranking:
            found = evaluate(extras.target.ranking, extras.target.questions, encode, True)
            if found["queries"]:
                out["target_MAP"] = round(found["MAP"], 2)
                out["target_queries"] = found["queries"]
    return out


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
) -> dict:
    """The epochs of a run: examples, ``step`` per batch (its losses), dev scoring, early
    stopping, checkpoints and ``run.json``; returns the run record."""
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
        with _progress(console, show_progress) as progress:
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
        _save_json(out_dir / RUN_FILE, run)
        if show_progress:
            console.print(_epoch_line(record, seconds))
    return run


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
    config, run = open_run(config, out_dir, resume)
    if config.encoder == "bowcnn":
        from qres.training.bowcnn import fit_bowcnn

        return fit_bowcnn(config, out_dir, run, data, console, show_progress, hard_negatives)
    device = resolve_device(config.device)
    data = data or load_dataset(config.dataset, config.data_dir)
    target = load_target(config.adapt_to) if config.adapt_to else None
    if resume:
        vocab = Vocab.load(out_dir / VOCAB_FILE)
        model = QuestionEncoder(EncoderConfig(**run["encoder"]))
        state = torch.load(out_dir / LAST_FILE, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
    else:
        extra = question_sentences(target.questions.values()) if target is not None else []
        model, vocab, run = _new_run(config, data, device, extra)
        if target is not None:
            run["training"]["target"] = {"corpus": target.path, "questions": len(target.questions)}
        out_dir.mkdir(parents=True, exist_ok=True)
        vocab.save(out_dir / VOCAB_FILE)
        state = None
    extras = _extras(config, data, target, vocab, model.config)
    model = model.to(device)
    for name, module in extras.modules().items():
        module.to(device)
        if state is not None:
            module.load_state_dict(state["extras"][name])
    tokenized = TokenizedQuestions(data.questions, vocab, config.title_max, config.body_max)
    encode = torch_encoder(model, vocab, device, config.title_max, config.body_max)

    if config.pretrain_epochs and "pretrain" not in run:
        _pretrain(
            model, data, tokenized, config, device, encode, run, out_dir, console, show_progress
        )

    trainable = [p for p in model.parameters() if p.requires_grad]
    for module in extras.modules().values():
        trainable += list(module.parameters())
    optimizer = torch.optim.Adam(trainable, lr=config.lr)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
    if config.tags:
        run["tag_labels"] = extras.tag_head.labels
        if "tag_baseline" not in run and extras.tagged[1]:
            baseline = tfidf_baseline(*extras.tagged)
            run["tag_baseline"] = {"method": "tf-idf one-vs-rest logistic regression", **baseline}
    return fit(
        model,
        optimizer,
        run,
        state,
        config,
        data,
        out_dir,
        step=lambda batch, rng: train_step(
            model, optimizer, batch, tokenized, device, config, extras, rng
        ),
        score_dev=lambda: evaluate(
            data.dev, data.questions, encode, data.skip_dev_without_relevant
        ),
        console=console,
        show_progress=show_progress,
        hard_negatives=hard_negatives,
        epoch_metrics=lambda: _extra_metrics(extras, encode, tokenized),
        extra_states=lambda: {name: m.state_dict() for name, m in extras.modules().items()},
    )


def _epoch_line(record: dict, seconds: float) -> str:
    line = (
        f"epoch {record['epoch']}: loss {record['loss']:.4f}  dev MAP {record['MAP']:.2f}  "
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


def _pretrain(model, data, tokenized, config, device, encode, run, out_dir, console, show):
    """Encoder-decoder pre-training, with dev metrics of the encoder before and after it."""
    before = evaluate(data.dev, data.questions, encode, data.skip_dev_without_relevant)
    run["pretrain"] = {
        "dev_before_pretraining": {m: round(before[m], 4) for m in METRICS},
        "history": [],
    }

    def on_epoch(record: dict) -> None:
        run["pretrain"]["history"].append(record)
        _save_json(out_dir / RUN_FILE, run)
        if show:
            console.print(
                f"pre-train epoch {record['epoch']}: loss {record['loss']:.4f}  "
                f"held-out perplexity {record['heldout_perplexity']:.1f}"
            )

    started = time.perf_counter()
    with _progress(console, show) as progress:
        pretrain(model, data.vocab_ids, tokenized, config, device, on_epoch, progress)
    after = evaluate(data.dev, data.questions, encode, data.skip_dev_without_relevant)
    run["pretrain"]["dev_after_pretraining"] = {m: round(after[m], 4) for m in METRICS}
    run["pretrain"]["seconds"] = round(time.perf_counter() - started, 2)
    torch.save({"model": model.state_dict()}, out_dir / PRETRAINED_FILE)
    _save_json(out_dir / RUN_FILE, run)
    if show:
        console.print(
            f"pre-trained encoder, before fine-tuning: dev MAP {after['MAP']:.2f} "
            f"MRR {after['MRR']:.2f} (untrained: MAP {before['MAP']:.2f} MRR {before['MRR']:.2f})"
        )


OPTIONAL_COLUMNS = {  # shown when the run has them
    "tag_MAP": "tag MAP",
    "domain_heldout_accuracy": "domain acc",
    "domain_probe_accuracy": "probe acc",
    "target_AUC0.05": "target AUC.05",
    "target_MAP": "target MAP",
}


def history_table(run: dict) -> Table:
    """Dev metrics per epoch, the best epoch marked."""
    table = Table(title=f"{run['train']['encoder']} on {run['training']['dataset']} (dev)")
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
