"""Neural question encoders: token ids + mask [batch, length] → an L2-normalised vector.

Five architectures from the question-retrieval papers (Lei et al. 2016, dos Santos et al.
2015), with their paper sizes as defaults:

* ``rcnn`` — recurrent CNN with adaptive gated decay (Lei et al. 2016, Sec. 4.1), d=400, n=2;
* ``gru`` (d=280), ``lstm`` (d=240) — one layer, left to right;
* ``cnn`` — one convolution of width 3 over the last 3 words, tanh, d=667;
* ``bigru`` — a GRU each way, 200+200, max pooling.

Batches are right-padded (``qres.encoders.vocab.pad_batch``): real tokens first, then padding. The
mask keeps padding out of every result: recurrences run left to right so padding never
reaches a real position (the RCNN also holds its state on masked steps), the backward GRU
reads each sequence reversed within its own length, the convolution looks only backwards,
and pooling reads real positions only. A question's title and body are encoded separately
(by one shared encoder, or two) and the two unit vectors averaged and re-normalised; an
empty field is left out of the average.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qres.encoders.vocab import UNK_ID

ENCODERS = ("rcnn", "gru", "lstm", "cnn", "bigru")
DEFAULT_HIDDEN = {"rcnn": 400, "gru": 280, "lstm": 240, "cnn": 667, "bigru": 200}
POOLINGS = {
    "rcnn": ("mean", "last"),
    "gru": ("mean", "max", "last"),
    "lstm": ("mean", "max", "last"),
    "cnn": ("mean", "max"),
    "bigru": ("max", "mean"),
}


@dataclass
class EncoderConfig:
    """Everything needed to rebuild an encoder (saved in checkpoints and the model card)."""

    kind: str
    vocab_size: int
    embedding_dim: int
    hidden: int | None = None  # per direction for bigru; None = the paper's size
    pooling: str | None = None  # None = the first of POOLINGS[kind]
    ngram: int = 2  # RCNN: number of accumulators n
    cnn_width: int = 3
    dropout: float = 0.1
    separate_fields: bool = False  # one encoder for titles, another for bodies
    finetune_embeddings: bool = False
    learned_unk: bool = True  # one trained <unk> vector; False = <unk> stays zero

    def __post_init__(self):
        if self.kind not in ENCODERS:
            raise ValueError(f"unknown encoder {self.kind!r} (one of {', '.join(ENCODERS)})")
        if self.hidden is None:
            self.hidden = DEFAULT_HIDDEN[self.kind]
        if self.pooling is None:
            self.pooling = POOLINGS[self.kind][0]
        if self.pooling not in POOLINGS[self.kind]:
            allowed = ", ".join(POOLINGS[self.kind])
            raise ValueError(f"{self.kind} pools by {allowed}, not {self.pooling!r}")
        if self.ngram < 1 or self.cnn_width < 1 or self.hidden < 1:
            raise ValueError("ngram, cnn_width and hidden must be positive")

    @property
    def output_dim(self) -> int:
        return 2 * self.hidden if self.kind == "bigru" else self.hidden

    def to_dict(self) -> dict:
        return asdict(self)


class WordEmbedding(nn.Module):
    """The word-vector table; frozen unless fine-tuned, with an optional learned ``<unk>``."""

    def __init__(self, config: EncoderConfig, vectors: np.ndarray | None = None):
        super().__init__()
        self.table = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=0)
        if vectors is not None:
            if vectors.shape != (config.vocab_size, config.embedding_dim):
                raise ValueError(f"vectors have shape {vectors.shape}, expected the vocab size")
            with torch.no_grad():
                self.table.weight.copy_(torch.from_numpy(np.asarray(vectors, dtype=np.float32)))
        self.table.weight.requires_grad_(config.finetune_embeddings)
        # A frozen table still gets a trained <unk>: a separate vector added at <unk> ids.
        self.unk = (
            nn.Parameter(torch.zeros(config.embedding_dim))
            if config.learned_unk and not config.finetune_embeddings
            else None
        )

    def forward(self, ids: Tensor) -> Tensor:
        x = self.table(ids)
        if self.unk is not None:
            x = x + (ids == UNK_ID).to(x.dtype).unsqueeze(-1) * self.unk
        return x


def rcnn_recurrence(
    proj: Tensor, u: Tensor, gate_bias: Tensor, out_bias: Tensor, mask: Tensor, ngram: int
) -> Tensor:
    """Hidden states [B, T, H] of the gated-decay RCNN from the input projections.

    ``proj[:, t]`` is [W^l x_t, W^(1) x_t, ..., W^(n) x_t].
    """
    batch, steps, hidden = proj.size(0), proj.size(1), u.size(0)
    # Split once, outside the loop: indexing ``proj`` at every step would make backward
    # allocate a full-size gradient per step (10x slower training).
    gate_steps = (proj[:, :, :hidden] + gate_bias).unbind(1)
    input_steps = proj[:, :, hidden:].unbind(1)
    keep_steps = mask.unsqueeze(2).unbind(1)
    u_t = u.t()
    h = proj.new_zeros(batch, hidden)
    cells = [proj.new_zeros(batch, hidden) for _ in range(ngram)]
    states: list[Tensor] = []
    for t in range(steps):
        keep = keep_steps[t]
        decay = torch.sigmoid(gate_steps[t] + torch.mm(h, u_t))
        inputs = input_steps[t]
        updated: list[Tensor] = []
        for k in range(ngram):
            inp = inputs[:, k * hidden : (k + 1) * hidden]
            if k > 0:
                inp = inp + cells[k - 1]  # c^(k-1)_{t-1}: the previous step's value
            c = decay * cells[k] + (1.0 - decay) * inp
            updated.append(keep * c + (1.0 - keep) * cells[k])
        cells = updated
        h = keep * torch.tanh(cells[ngram - 1] + out_bias) + (1.0 - keep) * h
        states.append(h)
    if steps == 0:
        return proj.new_zeros(batch, 0, hidden)
    return torch.stack(states, 1)


# The scripted copy is what the ONNX export traces, so that the loop runs for any length in
# the exported graph (a ``Loop`` node). TorchScript is deprecated in torch 2.x, but its
# exporter is what turns a data-dependent loop into ONNX reliably; the parity tests guard
# the result. Training runs the plain function: the same code, but without the JIT's
# switch to re-optimised graphs after a few calls, which changes the last float bits and so
# would break "same seed, same losses".
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    rcnn_recurrence_scripted = torch.jit.script(rcnn_recurrence)


class RCNNCore(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        h, self.ngram = config.hidden, config.ngram
        self.w = nn.Linear(config.embedding_dim, h * (config.ngram + 1), bias=False)
        self.u = nn.Parameter(torch.empty(h, h))
        nn.init.orthogonal_(self.u)
        self.gate_bias = nn.Parameter(torch.zeros(h))
        self.out_bias = nn.Parameter(torch.zeros(h))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        exporting = torch.onnx.is_in_onnx_export()
        recurrence = rcnn_recurrence_scripted if exporting else rcnn_recurrence
        return recurrence(self.w(x), self.u, self.gate_bias, self.out_bias, mask, self.ngram)


class RNNCore(nn.Module):
    """nn.GRU / nn.LSTM left to right; padding comes last, so it never reaches a real step."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        cls = nn.LSTM if config.kind == "lstm" else nn.GRU
        self.rnn = cls(config.embedding_dim, config.hidden, batch_first=True)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.rnn(x)[0]


def reverse_within_length(mask: Tensor) -> Tensor:
    """Index [B, T] that reverses each row's real tokens and leaves padding in place."""
    positions = torch.cumsum(torch.ones_like(mask), 1) - 1
    lengths = mask.sum(1, keepdim=True)
    return torch.where(positions < lengths, lengths - 1 - positions, positions).long()


class BiGRUCore(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.forward_rnn = nn.GRU(config.embedding_dim, config.hidden, batch_first=True)
        self.backward_rnn = nn.GRU(config.embedding_dim, config.hidden, batch_first=True)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        index = reverse_within_length(mask).unsqueeze(-1)
        reversed_x = torch.gather(x, 1, index.expand(-1, -1, x.size(2)))
        backward = self.backward_rnn(reversed_x)[0]
        backward = torch.gather(backward, 1, index.expand(-1, -1, backward.size(2)))
        return torch.cat([self.forward_rnn(x)[0], backward], 2)


class CNNCore(nn.Module):
    """tanh(W [x_{t-w+1}; ...; x_t] + b): each position sees only itself and earlier words."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.width = config.cnn_width
        self.conv = nn.Conv1d(config.embedding_dim, config.hidden, config.cnn_width)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        padded = F.pad(x.transpose(1, 2), (self.width - 1, 0))
        return torch.tanh(self.conv(padded)).transpose(1, 2)


CORES = {"rcnn": RCNNCore, "gru": RNNCore, "lstm": RNNCore, "cnn": CNNCore, "bigru": BiGRUCore}


def pool(states: Tensor, mask: Tensor, how: str) -> Tensor:
    """[B, T, H] → [B, H] over real positions; a row without any real position gives zeros."""
    counts = mask.sum(1, keepdim=True)
    present = (counts > 0).to(states.dtype)
    m = mask.unsqueeze(-1)
    if how == "mean":
        return (states * m).sum(1) / counts.clamp(min=1.0)
    if how == "max":
        # Every core ends in tanh (|state| <= 1), so -2 at padding is never the maximum.
        return (states * m - 2.0 * (1.0 - m)).amax(1) * present
    if how == "last":
        last = (counts - 1).clamp(min=0).long().unsqueeze(-1).expand(-1, 1, states.size(2))
        return torch.gather(states, 1, last).squeeze(1) * present
    raise ValueError(f"unknown pooling {how!r}")


class FieldEncoder(nn.Module):
    """Encodes one field (title or body): ``(token_ids, mask) → unit vector``."""

    def __init__(self, config: EncoderConfig, embedding: WordEmbedding):
        super().__init__()
        self.config = config
        self.embedding = embedding
        self.dropout = nn.Dropout(config.dropout)
        self.core = CORES[config.kind](config)

    def forward(self, token_ids: Tensor, mask: Tensor) -> Tensor:
        mask = mask.to(torch.float32)
        x = self.dropout(self.embedding(token_ids)) * mask.unsqueeze(-1)
        states = self.core(x, mask)
        if self.config.kind == "rcnn" and self.config.pooling == "mean":
            # Lei et al. (2016, footnote): normalise the states before averaging them.
            states = F.normalize(states, dim=-1, eps=1e-8)
        vector = self.dropout(pool(states, mask, self.config.pooling))
        return F.normalize(vector, dim=-1, eps=1e-8)


def combine_fields(title: Tensor, title_mask: Tensor, body: Tensor, body_mask: Tensor) -> Tensor:
    """Average of the title and body unit vectors, an empty field left out, re-normalised."""
    has_title = (title_mask.sum(1, keepdim=True) > 0).to(title.dtype)
    has_body = (body_mask.sum(1, keepdim=True) > 0).to(body.dtype)
    return F.normalize(title * has_title + body * has_body, dim=-1, eps=1e-8)


class QuestionEncoder(nn.Module):
    def __init__(self, config: EncoderConfig, vectors: np.ndarray | None = None):
        super().__init__()
        self.config = config
        self.embedding = WordEmbedding(config, vectors)
        self.title_encoder = FieldEncoder(config, self.embedding)
        self.body_encoder = FieldEncoder(config, self.embedding) if config.separate_fields else None

    def encode_field(self, field: str, token_ids: Tensor, mask: Tensor) -> Tensor:
        encoder = self.body_encoder if field == "body" and self.body_encoder else self.title_encoder
        return encoder(token_ids, mask)

    def forward(self, title_ids: Tensor, title_mask: Tensor, body_ids: Tensor, body_mask: Tensor):
        title = self.encode_field("title", title_ids, title_mask)
        body = self.encode_field("body", body_ids, body_mask)
        return combine_fields(title, title_mask, body, body_mask)
