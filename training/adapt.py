"""Adversarial domain adaptation by gradient reversal (Ganin & Lempitsky 2015; Shah et al. 2018).

A domain classifier reads the encoder's question vectors and learns to tell the source forum
(the labelled training data) from the target forum (unlabelled questions). Between the two
sits a gradient-reversal layer: the identity going forward, ``-λ ×`` the gradient going back,
so the classifier is trained to separate the domains while the encoder is trained to make
them inseparable, alongside its ranking loss on the source.

The target is a corpus file (any ``qres index`` format) or a folder in the Android layout of
Shah et al. (``corpus.tsv[.gz]``/``corpus.txt`` plus ``dev.pos.txt``/``dev.neg.txt``). Target
labels are never trained on, only reported after each epoch: AUC(0.05) of the Android pairs,
or MAP of a SemEval-layout XML's ranked candidates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from qres.corpus.readers import CorpusError, Question, detect_format, read_corpus
from qres.datasets.benchmarks import (
    RankingQuery,
    android_corpus_path,
    load_android,
    load_semeval_xml,
)
from qres.evaluation import ranking_metrics as metrics

HELDOUT_PER_DOMAIN = 500  # questions of each domain kept out to measure the classifier


class GradientReversal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return -ctx.scale * grad, None


def reverse_gradient(x: Tensor, scale: float) -> Tensor:
    return GradientReversal.apply(x, scale)


class DomainClassifier(nn.Module):
    """P(target | question vector): a one-hidden-layer perceptron behind gradient reversal."""

    def __init__(self, dim: int, scale: float, hidden: int = 100):
        super().__init__()
        self.scale = scale
        self.layers = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, vectors: Tensor) -> Tensor:
        return self.layers(reverse_gradient(vectors, self.scale)).squeeze(-1)

    def loss(self, source: Tensor, target: Tensor) -> tuple[Tensor, float]:
        """Binary cross-entropy over both domains (target = 1) and the accuracy."""
        logits = self(torch.cat([source, target]))
        labels = torch.cat([source.new_zeros(len(source)), target.new_ones(len(target))])
        loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)
        accuracy = ((logits > 0).float() == labels).float().mean().item()
        return loss, accuracy


@dataclass
class TargetDomain:
    path: str
    questions: dict[str, Question]
    pairs: list[RankingQuery] = field(default_factory=list)  # Android dev pairs, by query
    ranking: list[RankingQuery] = field(default_factory=list)  # SemEval-layout labels


def load_target(path: str | Path) -> TargetDomain:
    """The target questions (duplicate ids keep the last text) and any labels to report."""
    path = Path(path)
    if path.is_dir():  # the Android layout, read as `qres evaluate --dataset android` does
        corpus = android_corpus_path(path)
        if (path / "dev.pos.txt").exists() and (path / "dev.neg.txt").exists():
            labelled = load_android(path, "dev")
            return _checked(TargetDomain(str(corpus), labelled.questions, labelled.queries))
        return _checked(TargetDomain(str(corpus), _read(corpus, "askubuntu")))
    if not path.exists():
        raise CorpusError(path, None, "target corpus not found")
    fmt = detect_format(path)
    questions, ranking = _read(path, fmt), []
    if fmt == "semeval-xml":  # original questions are target text too; labels only reported
        ranking = load_semeval_xml(path).queries
        questions.update({q.id: q.question for q in ranking if q.question is not None})
    return _checked(TargetDomain(str(path), questions, ranking=ranking))


def _read(corpus: Path, fmt: str) -> dict[str, Question]:
    return {q.id: q for q in read_corpus(corpus, fmt)}


def _checked(target: TargetDomain) -> TargetDomain:
    if len(target.questions) < 2:
        raise CorpusError(target.path, None, "the target corpus needs at least 2 questions")
    return target


def heldout_split(ids: list[str], seed: int, salt: int) -> tuple[list[str], list[str]]:
    """(for training, held out): up to HELDOUT_PER_DOMAIN or a fifth, whichever is fewer."""
    order = np.random.default_rng([seed, salt]).permutation(len(ids))
    n_held = max(1, min(HELDOUT_PER_DOMAIN, len(ids) // 5))
    held = sorted(ids[i] for i in order[:n_held])
    kept = sorted(ids[i] for i in order[n_held:])
    return kept, held


def classifier_accuracy(classifier: DomainClassifier, source: Tensor, target: Tensor) -> float:
    """Accuracy on held-out questions, both domains weighted equally (chance = 50%)."""
    with torch.no_grad():
        src = (classifier(source) <= 0).float().mean().item()
        tgt = (classifier(target) > 0).float().mean().item()
    return 100 * (src + tgt) / 2


def target_auc(target: TargetDomain, vectors: dict[str, np.ndarray]) -> float:
    """AUC(0.05), in percent, of cosine scores over all of the target's labelled pairs."""
    labels, scores = [], []
    for query in target.pairs:
        for candidate in query.candidates:
            labels.append(candidate in query.relevant)
            scores.append(float(vectors[query.id] @ vectors[candidate]))
    return metrics.auc_percent(labels, scores)


def probe_accuracy(source: np.ndarray, target: np.ndarray, seed: int = 0) -> float:
    """Balanced accuracy (percent) of a fresh logistic regression telling the domains apart,
    cross-validated (5 folds) on frozen vectors: unlike the adversary itself, which the encoder
    chases, a new probe shows how separable the domains really are (50 = not at all)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    x = np.vstack([source, target])
    y = np.r_[np.zeros(len(source)), np.ones(len(target))]
    n_splits = max(2, min(5, len(source), len(target)))  # tiny held-out sets: fewer folds
    folds = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    probe = LogisticRegression(max_iter=2000, class_weight="balanced")
    return 100 * float(cross_val_score(probe, x, y, cv=folds, scoring="balanced_accuracy").mean())
