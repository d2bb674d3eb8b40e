"""Serving-side BOW-CNN scorer (dos Santos et al. 2015): numpy, scipy and onnxruntime, no torch.

The similarity of two questions is

    s(q, c) = β1 · cos(bow_q, bow_c) + β2 · cos(cnn_q, cnn_c)

* ``bow`` — a question's weighted bag of words: its title and body token ids
(``qres.encoders.vocab``,
  cut to the card's maximum lengths as for the encoder), entry ``tf(w) · weight[w]`` with the
  learned ``weight`` of ``bow_weights.npy``; ``<pad>`` and ``<unk>`` are left out, so two
  questions never match on words the vocabulary does not know;
* ``cnn`` — the question's unit vector from the exported CNN encoder (``qres.encoders.runtime``).

A BOW-CNN model directory is an ordinary encoder export plus ``bow_weights.npy`` (float32
[vocab], role ``bow_weights`` in the card's manifest, :mod:`qres.encoders.manifest`) and the card
fields
``"scorer": "bow-cnn"`` and ``"beta": [β1, β2]``. ``qres search`` refuses such a model: it
can apply only the CNN half of the score. Bags of words are scipy sparse rows, so scoring one
query against a whole corpus costs memory in proportion to the words present, not to the
vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

from qres.corpus.readers import Question
from qres.encoders.manifest import BOW_WEIGHTS_FILE, open_model
from qres.encoders.runtime import CARD_FILE, Encoder, EncoderError
from qres.encoders.vocab import UNK_ID, Vocab

SCORER = "bow-cnn"

Encode = Callable[[Sequence[Question]], np.ndarray]


def is_bowcnn_model(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` holds a model card that names the BOW-CNN scorer."""
    try:
        card = json.loads((Path(model_dir) / CARD_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(card, dict) and card.get("scorer") == SCORER


def bag_of_words(id_lists: Sequence[Sequence[int]], weights: np.ndarray) -> sparse.csr_matrix:
    """Unit rows [n, vocab] of ``tf(w) · weights[w]``; ids 0 and 1 (pad, unk) left out.

    A question without a known word (or whose words all weigh 0) gets an all-zero row, so
    its bag-of-words cosine with anything is 0.
    """
    rows = np.repeat(np.arange(len(id_lists)), [len(ids) for ids in id_lists])
    columns = np.fromiter((i for ids in id_lists for i in ids), dtype=np.int64, count=len(rows))
    known = columns > UNK_ID
    counts = sparse.csr_matrix(
        (np.ones(int(known.sum())), (rows[known], columns[known])),
        shape=(len(id_lists), len(weights)),
    )
    counts.sum_duplicates()  # term frequencies
    counts.data *= weights[counts.indices]
    norms = np.sqrt(np.asarray(counts.multiply(counts).sum(axis=1)).ravel())
    return (sparse.diags(1.0 / np.maximum(norms, 1e-8)) @ counts).tocsr()


@dataclass
class Represented:
    """Questions as the scorer sees them: unit bags of words and unit CNN vectors."""

    bow: sparse.csr_matrix  # [n, vocab]
    cnn: np.ndarray  # [n, dim]

    def rows(self, index: Sequence[int]) -> Represented:
        index = np.asarray(index, dtype=np.int64)
        return Represented(self.bow[index], self.cnn[index])

    def __len__(self) -> int:
        return self.cnn.shape[0]


class BowCnnScorer:
    """β1 · cos(bow) + β2 · cos(cnn) between questions.

    ``encode`` maps questions to unit CNN vectors: ``Encoder.encode_questions`` when served,
    the torch model during training (so the dev scores of training use this same code).
    """

    def __init__(
        self,
        encode: Encode,
        vocab: Vocab,
        weights: np.ndarray,
        beta: tuple[float, float],
        title_max: int,
        body_max: int,
    ):
        if np.shape(weights) != (len(vocab),):
            raise ValueError(f"{np.shape(weights)} BOW weights for a {len(vocab)}-word vocab")
        self.encode, self.vocab = encode, vocab
        self.weights = np.asarray(weights, dtype=np.float64)
        self.beta = (float(beta[0]), float(beta[1]))
        self.title_max, self.body_max = title_max, body_max

    @classmethod
    def load(cls, model_dir: str | Path, providers: Sequence[str] | None = None) -> BowCnnScorer:
        model = open_model(model_dir)
        if model.scorer != SCORER:
            raise EncoderError(
                f"{model_dir}: not a BOW-CNN model (its {CARD_FILE} lacks "
                f'"scorer": "{SCORER}"; export a run trained with --encoder bowcnn)'
            )
        encoder = Encoder.from_model(model, providers)
        card = encoder.card
        beta = card.get("beta")
        if not (
            isinstance(beta, list)
            and len(beta) == 2
            and all(isinstance(b, (int, float)) for b in beta)
        ):
            raise EncoderError(f"{model_dir / CARD_FILE}: bad or missing 'beta' (want [β1, β2])")
        path = model.component("bow_weights")
        if path is None:
            raise EncoderError(f"{model_dir / BOW_WEIGHTS_FILE}: BOW weights file not found")
        try:
            weights = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise EncoderError(f"{path}: cannot read the BOW weights ({err})") from None
        if weights.shape != (len(encoder.vocab),):
            raise EncoderError(
                f"{path}: {weights.shape} weights for a {len(encoder.vocab)}-word vocabulary"
            )
        return cls(
            encoder.encode_questions,
            encoder.vocab,
            weights,
            (beta[0], beta[1]),
            encoder.title_max,
            encoder.body_max,
        )

    def represent(self, questions: Sequence[Question]) -> Represented:
        """Bags of words and CNN vectors of ``questions`` (compute once, score many times)."""
        id_lists = []
        for q in questions:
            title, body = self.vocab.encode_question(q.title, q.body, self.title_max, self.body_max)
            id_lists.append(title + body)
        cnn = np.asarray(self.encode(questions), dtype=np.float32)
        return Represented(bag_of_words(id_lists, self.weights), cnn)

    def scores(self, queries: Represented, candidates: Represented) -> np.ndarray:
        """[len(queries), len(candidates)] float32 similarities of represented questions."""
        bow = np.asarray((queries.bow @ candidates.bow.T).todense())
        cnn = queries.cnn.astype(np.float64) @ candidates.cnn.T.astype(np.float64)
        return (self.beta[0] * bow + self.beta[1] * cnn).astype(np.float32)

    def similarity(self, queries: Sequence[Question], candidates: Sequence[Question]) -> np.ndarray:
        """[len(queries), len(candidates)] float32: β1 · cos(bow) + β2 · cos(cnn)."""
        return self.scores(self.represent(queries), self.represent(candidates))
