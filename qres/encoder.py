"""Serving-side question encoder: an exported model directory run with onnxruntime (no torch).

A model directory (written by ``qres export-onnx``) holds:

* ``model.onnx`` — inputs ``token_ids`` int64 [batch, length] and ``mask`` float32
  [batch, length] (1 = token, 0 = padding, right-padded), output ``vector`` float32
  [batch, dim], L2-normalised; it encodes titles, and bodies too unless the card names a
  separate body graph (``body.onnx``);
* ``vocab.txt`` — the token of each id (:mod:`qres.vocab`);
* ``model.json`` — the model card: architecture, sizes, training data, dev metrics, the
  fingerprint (sha256 over the graphs and ``vocab.txt``: what an index records) and the
  manifest of every file with its sha256 (:mod:`qres.model`), checked when it is loaded.

A question's vector is computed as in training: title and body tokenised with
``qres.text.tokenize`` and cut to the card's maximum lengths, each field encoded to a unit
vector, the vectors of the non-empty fields averaged and re-normalised.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from qres.corpus import Question
from qres.vocab import Vocab, VocabError, pad_batch

CARD_FILE = "model.json"
VOCAB_FILE = "vocab.txt"
CARD_FORMAT = "qres-encoder/1"


class EncoderError(RuntimeError):
    """A missing, corrupt or incompatible model directory; one sentence."""


def fingerprint(model_dir: str | Path, graph_files: Sequence[str]) -> str:
    """sha256 over the graph files (in the order given) and ``vocab.txt``."""
    digest = hashlib.sha256()
    for name in [*graph_files, VOCAB_FILE]:
        with open(Path(model_dir) / name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def graph_files(card: dict) -> list[str]:
    """The distinct graph files of a card, title graph first."""
    graphs = card["graphs"]
    return list(dict.fromkeys([graphs["title"], graphs["body"]]))


def _default_providers(ort) -> list[str]:
    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


class Encoder:
    """One onnxruntime session per graph, created once; thread-safe to call."""

    def __init__(self, model_dir: Path, card: dict, vocab: Vocab, sessions: dict):
        self.model_dir, self._card, self.vocab = model_dir, card, vocab
        self._sessions = sessions  # {"title": session, "body": session (maybe the same)}
        self.title_max = int(card["max_title_tokens"])
        self.body_max = int(card["max_body_tokens"])

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        providers: Sequence[str] | None = None,
        threads: int | None = None,
    ) -> Encoder:
        """The encoder of a model directory, verified by :func:`qres.model.open_model`."""
        from qres.model import open_model  # qres.model reads cards with this module's helpers

        return cls.from_model(open_model(model_dir), providers, threads)

    @classmethod
    def from_model(
        cls, model, providers: Sequence[str] | None = None, threads: int | None = None
    ) -> Encoder:
        """The encoder of an opened :class:`qres.model.Model`. ``threads``: onnxruntime
        threads per call (default: one per core); a server running many calls at once gives
        each one thread, so they do not fight over the cores."""
        import onnxruntime as ort

        model_dir, card = model.path, model.card
        files = graph_files(card)
        try:
            vocab = Vocab.load(model_dir / VOCAB_FILE)
        except VocabError as err:
            raise EncoderError(str(err)) from None
        options = ort.SessionOptions()
        options.log_severity_level = 3  # warnings about constant folding are not the user's
        if threads is not None:
            options.intra_op_num_threads = options.inter_op_num_threads = threads
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        chosen = list(providers) if providers else _default_providers(ort)
        built = {}
        for name in files:
            try:
                built[name] = ort.InferenceSession(
                    str(model_dir / name), sess_options=options, providers=chosen
                )
            except Exception as err:  # onnxruntime raises its own exception types
                first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
                raise EncoderError(
                    f"{model_dir / name}: cannot load the ONNX graph ({first_line})"
                ) from None
        graphs = card["graphs"]
        sessions = {"title": built[graphs["title"]], "body": built[graphs["body"]]}
        return cls(model_dir, card, vocab, sessions)

    @property
    def dim(self) -> int:
        return int(self._card["dim"])

    @property
    def fingerprint(self) -> str:
        return self._card["fingerprint"]

    @property
    def card(self) -> dict:
        return dict(self._card)

    @property
    def providers(self) -> list[str]:
        return list(self._sessions["title"].get_providers())

    def encode_ids(self, sequences: Sequence[Sequence[int]], field: str, batch_size: int = 256):
        """Unit vectors [n, dim] of token-id sequences; an empty sequence gives zeros."""
        out = np.zeros((len(sequences), self.dim), dtype=np.float32)
        session = self._sessions[field]
        # Similar lengths share a batch so little time goes on padding.
        order = sorted((i for i, s in enumerate(sequences) if s), key=lambda i: len(sequences[i]))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            ids, mask = pad_batch([sequences[i] for i in rows])
            out[rows] = session.run(["vector"], {"token_ids": ids, "mask": mask})[0]
        return out

    def encode_questions(self, questions: Sequence[Question], batch_size: int = 256) -> np.ndarray:
        """Unit vectors [n, dim] float32 of questions (title and body averaged)."""
        encoded = [
            self.vocab.encode_question(q.title, q.body, self.title_max, self.body_max)
            for q in questions
        ]
        titles = self.encode_ids([t for t, _ in encoded], "title", batch_size)
        bodies = self.encode_ids([b for _, b in encoded], "body", batch_size)
        return _normalize(titles + bodies)

    def encode_query(self, text: str) -> np.ndarray:
        """Unit vector [dim] of a search query, read as a question title without a body."""
        return self.encode_questions([Question("query", text, "")])[0]


def read_card(path: Path) -> dict:
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EncoderError(f"{path}: model card not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise EncoderError(f"{path}: not a valid model card ({err})") from None
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        found = card.get("format") if isinstance(card, dict) else None
        raise EncoderError(f"{path}: not a {CARD_FORMAT} model card (format {found!r})")
    for key in ("dim", "max_title_tokens", "max_body_tokens", "fingerprint"):
        if not isinstance(card.get(key), int if key != "fingerprint" else str):
            raise EncoderError(f"{path}: not a valid model card (bad or missing {key!r})")
    graphs = card.get("graphs")
    if not isinstance(graphs, dict) or not {"title", "body"} <= graphs.keys():
        raise EncoderError(f"{path}: not a valid model card (bad or missing 'graphs')")
    return card


def _normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-8)).astype(np.float32)
