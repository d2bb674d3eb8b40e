"""The max-margin ranking loss of Lei et al. (2016) and dos Santos et al. (2015).

For a query q with one similar question p+ and negatives Q⁻(q), with cosine similarity s:

    loss(q) = max(0, max_{p in Q⁻(q)} s(q, p) − s(q, p+) + δ)

which is max_{p in {p+} ∪ Q⁻(q)} (s(q, p) − s(q, p+) + δ·[p ≠ p+]): only the most offending
negative counts. The default δ = 0.2 is within the 0.01–0.5 the papers used; on cosine
scores in [-1, 1] it asks for a clear gap without forcing near-orthogonal negatives.

Distillation (``qres train --teacher``) has its own loss, :func:`similarity_distillation_loss`.
"""

from __future__ import annotations

import torch
from torch import Tensor

DEFAULT_MARGIN = 0.2


def max_margin_loss(query: Tensor, candidates: Tensor, margin: float = DEFAULT_MARGIN) -> Tensor:
    """Mean loss over a batch.

    ``query`` [B, D] and ``candidates`` [B, 1 + K, D] are unit vectors (so a dot product is
    the cosine); ``candidates[:, 0]`` is the positive, the rest are negatives.
    """
    scores = torch.einsum("bd,bkd->bk", query, candidates)
    worst_negative = scores[:, 1:].max(dim=1).values
    return torch.relu(worst_negative - scores[:, 0] + margin).mean()


DEFAULT_TEMPERATURE = 0.05


def similarity_distillation_loss(
    student: Tensor, teacher: Tensor, temperature: float = DEFAULT_TEMPERATURE
) -> Tensor:
    """KL(teacher ‖ student) between in-batch similarity distributions, mean over rows.

    ``student`` [B, D] and ``teacher`` [B, D'] are unit vectors of the same B questions (the
    dimensions may differ). Row i of each is softmax over j ≠ i of cos(i, j) / temperature:
    which other questions of the batch each model finds closest, and how much closer.
    A student with the teacher's cosines scores 0.
    """
    n = student.size(0)
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=student.device)

    def log_distribution(vectors: Tensor) -> Tensor:
        scores = (vectors @ vectors.T)[off_diagonal].view(n, n - 1) / temperature
        return torch.log_softmax(scores, dim=1)

    target = log_distribution(teacher.to(student.dtype))
    return torch.nn.functional.kl_div(
        log_distribution(student), target, log_target=True, reduction="batchmean"
    )
