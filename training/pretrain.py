"""Encoder–decoder pre-training (Lei et al. 2016, Sec. 4.2): the encoder learns to summarise.

A decoder reads the encoder's vector of a question's body (or title) and generates its title,
word by word: a conditional language model P(title | body) and P(title | title), trained on
the unlabelled questions by cross-entropy. The encoder's weights then start the max-margin
fine-tuning. The decoder is of the encoder's own kind (the RCNN, GRU, LSTM and CNN cores all
read left to right; the Bi-GRU's decoder is a GRU), fed at each step the previous title word
and the encoder's vector. It predicts the ``pretrain_vocab`` most frequent title words, plus
``<unk>`` for the rest and ``<eos>`` to end the title; held-out perplexity is exp of the mean
negative log-likelihood per predicted token (``<eos>`` included) on questions kept out of
training.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qres.encoders.vocab import PAD_ID, UNK_ID, pad_batch
from qres.training.encoders import CORES, QuestionEncoder

HELDOUT_SHARE = 0.05
UNK_CLASS, EOS_CLASS = 0, 1


class TitleDecoder(nn.Module):
    """Scores the next title word from the previous one and the encoder's vector."""

    def __init__(self, encoder: QuestionEncoder, target_ids: Sequence[int]):
        super().__init__()
        config = encoder.config
        kind = "gru" if config.kind == "bigru" else config.kind
        core_config = replace(
            config,
            kind=kind,
            hidden=config.hidden,
            pooling=None,
            embedding_dim=config.embedding_dim + config.output_dim,
        )
        self.embedding = encoder.embedding  # shared with the encoder
        self.core = CORES[kind](core_config)
        self.output = nn.Linear(config.hidden, len(target_ids) + 2)
        # vocabulary id → output class: <unk> for words outside the decoder's vocabulary.
        classes = torch.full((config.vocab_size,), UNK_CLASS, dtype=torch.long)
        classes[torch.as_tensor(list(target_ids), dtype=torch.long)] = torch.arange(
            2, len(target_ids) + 2
        )
        self.register_buffer("classes", classes, persistent=False)

    def forward(self, context: Tensor, title_ids: Tensor, title_mask: Tensor) -> Tensor:
        """Summed negative log-likelihood of the titles and the number of predicted tokens.

        Step 0 reads a zero vector (``<pad>``'s embedding) as the start symbol; step t reads
        title word t-1; the targets are the title words then ``<eos>``.
        """
        batch = title_ids.size(0)
        start = title_ids.new_full((batch, 1), PAD_ID)
        inputs = torch.cat([start, title_ids], 1)
        lengths = title_mask.sum(1).long()
        steps_mask = torch.cat([title_mask.new_ones(batch, 1), title_mask], 1)
        x = self.embedding(inputs) * steps_mask.unsqueeze(-1)
        x = torch.cat([x, context.unsqueeze(1).expand(-1, x.size(1), -1)], 2)
        states = self.core(x, steps_mask)
        logits = self.output(states)
        targets = torch.cat([self.classes[title_ids], title_ids.new_zeros(batch, 1)], 1)
        targets.scatter_(1, lengths.unsqueeze(1), EOS_CLASS)
        nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        return (nll * steps_mask).sum(), steps_mask.sum()


def decoder_targets(title_token_ids: Sequence[Sequence[int]], size: int) -> list[int]:
    """The ``size`` most frequent title word ids (``<unk>`` and padding excluded)."""
    counts = Counter(i for ids in title_token_ids for i in ids if i not in (PAD_ID, UNK_ID))
    return [i for i, _ in counts.most_common(size)]


def split_heldout(ids: Sequence[str], seed: int) -> tuple[list[str], list[str]]:
    """(train, held-out) question ids: a seeded 5% (at least one) kept out for perplexity."""
    order = np.random.default_rng([seed, 7]).permutation(len(ids))
    n_heldout = max(1, int(round(len(ids) * HELDOUT_SHARE))) if len(ids) > 1 else 0
    held = {ids[i] for i in order[:n_heldout]}
    return [i for i in ids if i not in held], [i for i in ids if i in held]


def _pairs(qids: Sequence[str], tokenized) -> list[tuple[str, str]]:
    """(question id, source field) pairs: title|body where there is a body, title|title."""
    pairs = []
    for qid in qids:
        title, body = tokenized.ids(qid)
        if not title:
            continue
        pairs.append((qid, "title"))
        if body:
            pairs.append((qid, "body"))
    return pairs


def _batch_nll(model: QuestionEncoder, decoder: TitleDecoder, batch, tokenized, device):
    nll, tokens = 0.0, 0.0
    for field in ("title", "body"):
        qids = [qid for qid, f in batch if f == field]
        if not qids:
            continue
        ids = [tokenized.ids(q) for q in qids]
        source = [t if field == "title" else b for t, b in ids]
        source_ids, source_mask = (torch.from_numpy(a).to(device) for a in pad_batch(source))
        title_ids, title_mask = (
            torch.from_numpy(a).to(device) for a in pad_batch([t for t, _ in ids])
        )
        context = model.encode_field(field, source_ids, source_mask)
        field_nll, field_tokens = decoder(context, title_ids, title_mask)
        nll, tokens = nll + field_nll, tokens + field_tokens
    return nll, tokens


def heldout_perplexity(model, decoder, pairs, tokenized, device, batch_size=64) -> float:
    """exp(mean NLL per token) of the held-out titles given their bodies (title|body only)."""
    model.eval()
    decoder.eval()
    body_pairs = [p for p in pairs if p[1] == "body"] or pairs
    total, count = 0.0, 0.0
    with torch.no_grad():
        for start in range(0, len(body_pairs), batch_size):
            nll, tokens = _batch_nll(
                model, decoder, body_pairs[start : start + batch_size], tokenized, device
            )
            total, count = total + float(nll), count + float(tokens)
    return math.exp(total / max(count, 1.0))


def pretrain(
    model: QuestionEncoder,
    question_ids: Sequence[str],
    tokenized,
    config,
    device,
    on_epoch: Callable[[dict], None] | None = None,
    progress=None,
) -> list[dict]:
    """Pre-train ``model``'s encoder in place for ``config.pretrain_epochs`` epochs.

    Returns per-epoch records: epoch, mean training loss (NLL per token) and held-out
    perplexity (title | body).
    """
    train_ids, heldout_ids = split_heldout(list(question_ids), config.seed)
    targets = decoder_targets([tokenized.ids(q)[0] for q in train_ids], config.pretrain_vocab)
    decoder = TitleDecoder(model, targets).to(device)
    params = [p for p in [*model.parameters(), *decoder.parameters()] if p.requires_grad]
    optimizer = torch.optim.Adam(list(dict.fromkeys(params)), lr=config.lr)
    train_pairs, heldout_pairs = _pairs(train_ids, tokenized), _pairs(heldout_ids, tokenized)
    history = []
    for epoch in range(1, config.pretrain_epochs + 1):
        rng = np.random.default_rng([config.seed, 1000 + epoch])
        torch.manual_seed(config.seed * 1000 + 500 + epoch)
        order = rng.permutation(len(train_pairs))
        started = time.perf_counter()
        model.train()
        decoder.train()
        losses = []
        task = (
            progress.add_task(
                f"pre-train {epoch}/{config.pretrain_epochs}",
                total=len(order),
                loss=0.0,
                rate=0.0,
            )
            if progress is not None
            else None
        )
        batch_size = 2 * config.batch_size
        for start in range(0, len(order), batch_size):
            batch = [train_pairs[i] for i in order[start : start + batch_size]]
            nll, tokens = _batch_nll(model, decoder, batch, tokenized, device)
            loss = nll / tokens
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
            losses.append(loss.item())
            if task is not None:
                done = start + len(batch)
                rate = done / max(time.perf_counter() - started, 1e-9)
                progress.update(task, completed=done, loss=float(np.mean(losses)), rate=rate)
        if task is not None:
            progress.remove_task(task)
        record = {
            "epoch": epoch,
            "loss": round(float(np.mean(losses)), 4) if losses else 0.0,
            "heldout_perplexity": round(
                heldout_perplexity(model, decoder, heldout_pairs, tokenized, device), 2
            ),
            "train_pairs": len(train_pairs),
            "heldout_pairs": len(heldout_pairs),
        }
        history.append(record)
        if on_epoch is not None:
            on_epoch(record)
    model.train()
    return history
