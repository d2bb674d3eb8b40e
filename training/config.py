"""The settings of a training run (``TrainConfig``), its error type and the device it runs on."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import NamedTuple

import torch

from qres.text import BODY_MAX_TOKENS, TITLE_MAX_TOKENS
from qres.training.losses import DEFAULT_MARGIN, DEFAULT_TEMPERATURE


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
    precision: str = "fp32"  # bf16 | fp16: mixed precision on CUDA (see mixed_precision)
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
    # Distillation (qres.training.distill): reproduce a teacher model directory's in-batch
    # similarities on unlabelled questions; loss = supervised_weight * ranking + distillation.
    teacher: str | None = None
    unlabelled: list[str] = field(default_factory=list)  # corpus files beside the training data
    supervised_weight: float = 1.0
    distill_temperature: float = DEFAULT_TEMPERATURE
    distill_anchors: int = 32  # questions drawn per step, each with its teacher neighbours
    distill_neighbours: int = 3

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    @classmethod
    def from_options(cls, options: dict) -> TrainConfig:
        """The settings ``qres train``'s options give (None: an option not given, its default
        kept); paths become strings, and ``unlabelled`` needs a ``teacher``."""
        settings = {k: v for k, v in options.items() if v is not None}
        settings["data_dir"] = str(settings["data_dir"]) if "data_dir" in settings else None
        if "adapt_to" in settings:
            settings["adapt_to"] = str(settings["adapt_to"])
        settings["unlabelled"] = [str(path) for path in settings.get("unlabelled", ())]
        if settings["unlabelled"] and "teacher" not in settings:
            raise TrainError(
                "--unlabelled needs --teacher (the unlabelled questions are only distilled on)"
            )
        return cls(**settings)


PRECISIONS = ("fp32", "bf16", "fp16")


class MixedPrecision(NamedTuple):
    """Autocast to ``dtype`` on ``device_type``; ``scaler`` scales the loss (fp16 only: its
    small range underflows gradients, bf16's does not)."""

    device_type: str
    dtype: torch.dtype
    scaler: torch.amp.GradScaler


def mixed_precision(precision: str, device: torch.device) -> MixedPrecision | None:
    """How a run trains on ``device``: None (fp32, always on the CPU) or mixed precision."""
    if precision not in PRECISIONS:
        raise TrainError(f"unknown precision {precision!r} (one of {', '.join(PRECISIONS)})")
    if precision == "fp32":
        return None
    if device.type != "cuda":
        raise TrainError(f"precision {precision} needs a CUDA device; the CPU trains in fp32")
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        raise TrainError("this GPU has no bf16: use --precision fp16")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return MixedPrecision("cuda", dtype, torch.amp.GradScaler("cuda", enabled=precision == "fp16"))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise TrainError(f"device {name!r} asked for, but CUDA is not available")
    return torch.device(name)
