"""Tag suggestion from a model trained with ``qres train --tags``, (the metrics that score it:
:mod:`qres.evaluation.tag_metrics`).

The model directory holds, beside the encoder, ``tags.npz`` (listed in the card's manifest,
:mod:`qres.encoders.manifest`): the multi-label head's weights
[tags, dim], biases [tags] and tag names. A tag's score is sigmoid(w · v + b) for the
question vector v, the encoder's output that retrieval also uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from qres.corpus.readers import Question
from qres.encoders.manifest import TAGS_FILE, open_model
from qres.encoders.runtime import Encoder, EncoderError


class TagPredictor:
    def __init__(self, encoder: Encoder, weight: np.ndarray, bias: np.ndarray, labels: list[str]):
        self.encoder, self.weight, self.bias, self.labels = encoder, weight, bias, labels

    @classmethod
    def load(cls, model_dir: str | Path) -> TagPredictor:
        model = open_model(model_dir)
        path = model.component("tag_head")
        if path is None:
            raise EncoderError(
                f"{model_dir}: this model has no tag head ({TAGS_FILE}); train it with "
                "`qres train --tags` and export it with `qres export-onnx`"
            )
        try:
            with np.load(path, allow_pickle=False) as saved:
                weight, bias = saved["weight"], saved["bias"]
                labels = [str(t) for t in saved["labels"]]
        except (OSError, KeyError, ValueError) as err:
            raise EncoderError(f"{path}: cannot read the tag head ({err})") from None
        encoder = Encoder.from_model(model)
        if weight.shape != (len(labels), encoder.dim) or bias.shape != (len(labels),):
            raise EncoderError(f"{path}: tag head shape {weight.shape} does not fit the encoder")
        return cls(encoder, weight, bias, labels)

    def scores(self, questions: Sequence[Question]) -> np.ndarray:
        """[questions, tags] probabilities."""
        vectors = self.encoder.encode_questions(questions)
        return 1.0 / (1.0 + np.exp(-(vectors @ self.weight.T + self.bias)))

    def suggest(self, question: Question, k: int = 5) -> list[tuple[str, float]]:
        row = self.scores([question])[0]
        order = np.argsort(-row, kind="stable")[:k]
        return [(self.labels[i], float(row[i])) for i in order]
