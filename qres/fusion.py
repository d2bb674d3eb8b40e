"""Fusing the BM25 and cosine scores of a query's candidates into one score.

fused = w_bm25 · bm25 / max_bm25(query) + w_cosine · cosine + bias

BM25 is divided by the query's top BM25 score so its scale no longer depends on query
length; the cosine is in [-1, 1] already. The weights are learned by
:func:`tune_fusion` (logistic regression on labelled candidate lists, e.g. SemEval train)
and saved as ``fusion.json`` beside the model; without that file :data:`DEFAULT` is used.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Fusion:
    bm25: float
    cosine: float
    bias: float = 0.0
    source: str = "default"

    def score(self, bm25: np.ndarray, cosine: np.ndarray) -> np.ndarray:
        return self.bm25 * normalize_bm25(bm25) + self.cosine * cosine + self.bias

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, model_dir: str | Path) -> Fusion:
        path = Path(model_dir) / "fusion.json"
        if not path.exists():
            return DEFAULT
        return cls(**json.loads(path.read_text()))


# Equal say for the two signals: on SemEval train the tuned weights are of this order.
DEFAULT = Fusion(bm25=1.0, cosine=1.0, source="default")


def normalize_bm25(scores: np.ndarray) -> np.ndarray:
    top = float(np.max(scores)) if len(scores) else 0.0
    return scores / top if top > 0 else np.zeros_like(scores)


def features(bm25: np.ndarray, cosine: np.ndarray) -> np.ndarray:
    return np.stack([normalize_bm25(bm25), cosine], axis=1)


def tune_fusion(
    lists: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], source: str, steps: int = 2000
) -> Fusion:
    """Logistic regression of relevance on (normalised BM25, cosine) over candidate lists.

    ``lists``: per query, (bm25 scores, cosines, 0/1 labels) of its candidates. Plain
    gradient descent on the mean log-loss: two features need nothing heavier.
    """
    x = np.concatenate([features(b, c) for b, c, _ in lists])
    y = np.concatenate([labels for _, _, labels in lists]).astype(float)
    w, bias = np.zeros(2), 0.0
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(x @ w + bias)))
        grad = p - y
        w -= 0.5 * (x.T @ grad) / len(y)
        bias -= 0.5 * grad.mean()
    return Fusion(bm25=float(w[0]), cosine=float(w[1]), bias=float(bias), source=source)
