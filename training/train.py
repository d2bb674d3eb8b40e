"""Train a question encoder with the max-margin loss, early-stopped on dev MAP: the encoder's
objectives (ranking, optional tag prediction and domain adaptation, optional pre-training) on
top of the shared run directory (``qres.training.rundir``) and epoch loop
(``qres.training.loop``). ``encoder="bowcnn"`` hands over to ``qres.training.bowcnn``. With a
``teacher`` the ranking loss is joined (or replaced) by distillation
(``qres.training.distill``), and the epoch is chosen on held-out train queries instead of dev.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

from qres.corpus.readers import Question
from qres.encoders.vocab import Vocab
from qres.evaluation.tag_metrics import TAG_METRICS
from qres.training.adapt import (
    DomainClassifier,
    TargetDomain,
    classifier_accuracy,
    heldout_split,
    load_target,
    probe_accuracy,
    target_auc,
)
from qres.training.bowcnn import fit_bowcnn
from qres.training.config import (
    MixedPrecision,
    TrainConfig,
    TrainError,
    mixed_precision,
    resolve_device,
)
from qres.training.data import (
    HardNegatives,
    TokenizedQuestions,
    TrainingData,
    hold_out_train,
    load_dataset,
    question_sentences,
)
from qres.training.distill import (
    HELDOUT_FRACTION,
    Distillation,
    distillation_pool,
    load_teacher,
    prepare,
    read_unlabelled,
)
from qres.training.encoders import EncoderConfig, QuestionEncoder
from qres.training.evaluate import evaluate
from qres.training.loop import candidate_rows, fit, progress_bar, torch_encoder
from qres.training.losses import max_margin_loss, similarity_distillation_loss
from qres.training.pretrain import pretrain
from qres.training.rundir import (
    LAST_FILE,
    METRICS,
    PRETRAINED_FILE,
    RUN_FILE,
    VOCAB_FILE,
    new_run,
    open_run,
    save_json,
)
from qres.training.tags import TagHead, head_metrics, tag_labels, tagged_split, tfidf_baseline

__all__ = ["TrainConfig", "TrainError", "distill_step", "train", "train_step"]


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
    model,
    optimizer,
    batch,
    tokenized,
    device,
    config: TrainConfig,
    extras=None,
    rng=None,
    amp: MixedPrecision | None = None,
) -> dict[str, float]:
    """One optimiser step; the losses (and the domain classifier's accuracy) of the batch.
    With ``amp`` the forward pass and losses run under autocast."""
    with _autocast(amp):
        loss, out = _losses(model, batch, tokenized, device, config, extras, rng)
    _optimise(optimizer, loss, config.max_grad_norm, amp)
    return out


def _losses(model, batch, tokenized, device, config: TrainConfig, extras, rng):
    ranking, vectors, ids = _ranking_loss(model, batch, tokenized, device, config.margin)
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
    return loss, out


def distill_step(
    model,
    optimizer,
    batch,
    tokenized,
    device,
    config: TrainConfig,
    distill: Distillation,
    rng,
    amp: MixedPrecision | None = None,
) -> dict[str, float]:
    """One optimiser step of distillation: the similarity loss on a batch of the pool, plus
    ``supervised_weight`` × the ranking loss of the labelled ``batch`` (skipped at 0)."""
    out: dict[str, float] = {}
    with _autocast(amp):
        ids, teacher = distill.batch(rng)
        student = model(*distill.tokens.batch(ids, device))
        loss = similarity_distillation_loss(student, teacher.to(device), config.distill_temperature)
        out["distill_loss"] = loss.item()
        if config.supervised_weight > 0:
            ranking = _ranking_loss(model, batch, tokenized, device, config.margin)[0]
            loss = loss + config.supervised_weight * ranking
            out["ranking_loss"] = ranking.item()
    _optimise(optimizer, loss, config.max_grad_norm, amp)
    return {"loss": loss.item(), **out}


def _ranking_loss(model, batch, tokenized, device, margin: float):
    """The max-margin loss of a batch of examples, the vectors of its questions, their ids."""
    ids = list(dict.fromkeys(i for e in batch for i in (e.query, e.positive, *e.negatives)))
    row = {qid: n for n, qid in enumerate(ids)}
    vectors = model(*tokenized.batch(ids, device))
    queries = vectors[torch.tensor([row[e.query] for e in batch], device=device)]
    candidates = vectors[candidate_rows(batch, row).to(device)]
    return max_margin_loss(queries, candidates, margin), vectors, ids


def _autocast(amp: MixedPrecision | None):
    return torch.autocast(amp.device_type, amp.dtype) if amp else contextlib.nullcontext()


def _optimise(optimizer, loss, max_grad_norm: float, amp: MixedPrecision | None) -> None:
    optimizer.zero_grad()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if amp is None:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        return
    amp.scaler.scale(loss).backward()
    amp.scaler.unscale_(optimizer)  # clip the true gradients
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    amp.scaler.step(optimizer)  # skipped when fp16 gradients overflowed
    amp.scaler.update()


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
    if config.teacher:
        _check_distillation(config)
    if config.encoder == "bowcnn":
        return fit_bowcnn(config, out_dir, run, data, console, show_progress, hard_negatives)
    device = resolve_device(config.device)
    amp = mixed_precision(config.precision, device)
    if config.teacher:
        teacher = load_teacher(config.teacher)
        # Distillation never reads the dev set: the epoch is chosen on held-out train queries.
        data = data or load_dataset(config.dataset, config.data_dir, with_dev=False)
        data = hold_out_train(data, HELDOUT_FRACTION, config.seed)
        unlabelled = read_unlabelled(config.unlabelled)
    else:
        data = data or load_dataset(config.dataset, config.data_dir)
        teacher, unlabelled = None, []
    target = load_target(config.adapt_to) if config.adapt_to else None
    if resume:
        vocab = Vocab.load(out_dir / VOCAB_FILE)
        model = QuestionEncoder(EncoderConfig(**run["encoder"]))
        state = torch.load(out_dir / LAST_FILE, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        distilled_from = run["training"].get("teacher", {}).get("fingerprint")
        if teacher is not None and teacher.fingerprint != distilled_from:
            raise TrainError(
                f"--teacher {config.teacher} has fingerprint {teacher.fingerprint[:12]}, but "
                f"the run in {out_dir} was distilled from {str(distilled_from)[:12]}"
            )
    else:
        extra = question_sentences(target.questions.values()) if target is not None else []
        model, vocab, run = new_run(config, data, device, extra + question_sentences(unlabelled))
        if target is not None:
            run["training"]["target"] = {"corpus": target.path, "questions": len(target.questions)}
        out_dir.mkdir(parents=True, exist_ok=True)
        vocab.save(out_dir / VOCAB_FILE)
        state = None
    distill = None
    if teacher is not None:
        pool = distillation_pool(data, unlabelled)
        distill, record = prepare(config, teacher, pool, vocab, console.print)
        run["training"]["teacher"] = record
        run["training"].update(
            scored_on="held-out train", heldout_queries=len(data.dev), dev_queries=0
        )
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
        step=lambda batch, rng: (
            distill_step(model, optimizer, batch, tokenized, device, config, distill, rng, amp)
            if distill is not None
            else train_step(model, optimizer, batch, tokenized, device, config, extras, rng, amp)
        ),
        score_dev=lambda: evaluate(
            data.dev, data.questions, encode, data.skip_dev_without_relevant
        ),
        console=console,
        show_progress=show_progress,
        hard_negatives=hard_negatives,
        epoch_metrics=lambda: _extra_metrics(extras, encode, tokenized),
        extra_states=lambda: {name: m.state_dict() for name, m in extras.modules().items()},
        scored_on=run["training"].get("scored_on", "dev"),
    )


def _check_distillation(config: TrainConfig) -> None:
    others = {
        "--tags": config.tags,
        "--adapt-to": config.adapt_to,
        "--pretrain": config.pretrain_epochs,
        "--encoder bowcnn": config.encoder == "bowcnn",
    }
    given = [name for name, value in others.items() if value]
    if given:
        raise TrainError(f"--teacher cannot be combined with {', '.join(given)}")
    if config.supervised_weight < 0 or config.distill_temperature <= 0:
        raise TrainError("--supervised-weight must be >= 0 and --distill-temperature > 0")


def _pretrain(model, data, tokenized, config, device, encode, run, out_dir, console, show):
    """Encoder-decoder pre-training, with dev metrics of the encoder before and after it."""
    before = evaluate(data.dev, data.questions, encode, data.skip_dev_without_relevant)
    run["pretrain"] = {
        "dev_before_pretraining": {m: round(before[m], 4) for m in METRICS},
        "history": [],
    }

    def on_epoch(record: dict) -> None:
        run["pretrain"]["history"].append(record)
        save_json(out_dir / RUN_FILE, run)
        if show:
            console.print(
                f"pre-train epoch {record['epoch']}: loss {record['loss']:.4f}  "
                f"held-out perplexity {record['heldout_perplexity']:.1f}"
            )

    started = time.perf_counter()
    with progress_bar(console, show) as progress:
        pretrain(model, data.vocab_ids, tokenized, config, device, on_epoch, progress)
    after = evaluate(data.dev, data.questions, encode, data.skip_dev_without_relevant)
    run["pretrain"]["dev_after_pretraining"] = {m: round(after[m], 4) for m in METRICS}
    run["pretrain"]["seconds"] = round(time.perf_counter() - started, 2)
    torch.save({"model": model.state_dict()}, out_dir / PRETRAINED_FILE)
    save_json(out_dir / RUN_FILE, run)
    if show:
        console.print(
            f"pre-trained encoder, before fine-tuning: dev MAP {after['MAP']:.2f} "
            f"MRR {after['MRR']:.2f} (untrained: MAP {before['MAP']:.2f} MRR {before['MRR']:.2f})"
        )
