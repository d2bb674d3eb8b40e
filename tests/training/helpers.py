"""Helpers of the encoder-training tests: tiny models and the AskUbuntu-format fixture."""

from __future__ import annotations

from pathlib import Path

import torch

from qres.vocab import pad_batch
from training.encoders import EncoderConfig, QuestionEncoder

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "askubuntu"
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def tiny_config(**overrides):
    """A TrainConfig small enough for a test: 16-d random vectors, 12-d encoder."""
    from training.train import TrainConfig

    values = dict(
        dataset="askubuntu",
        data_dir=str(FIXTURE),
        encoder="gru",
        hidden=12,
        vectors="random",
        random_dim=16,
        finetune_embeddings=True,
        epochs=2,
        batch_size=8,
        negatives=8,
        dropout=0.0,
    )
    values.update(overrides)
    return TrainConfig(**values)


def tiny_model(kind: str, pooling: str | None = None, **extra) -> QuestionEncoder:
    torch.manual_seed(0)
    config = EncoderConfig(
        kind, vocab_size=40, embedding_dim=8, hidden=6, pooling=pooling, dropout=0.0, **extra
    )
    model = QuestionEncoder(config).eval()
    with torch.no_grad():  # non-zero biases so that padding would show if it leaked in
        for name, p in model.named_parameters():
            if "bias" in name or name.endswith("unk"):
                p.uniform_(-0.5, 0.5)
    return model


def tensors(sequences, extra_padding: int = 0):
    ids, mask = pad_batch(sequences)
    ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
    if extra_padding:
        ids = torch.nn.functional.pad(ids, (0, extra_padding), value=0)
        mask = torch.nn.functional.pad(mask, (0, extra_padding))
    return ids, mask
