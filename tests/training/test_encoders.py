"""The encoders: masking makes padding invisible, fields combine as documented."""

from __future__ import annotations

import pytest
import torch

from qres.encoders.vocab import UNK_ID
from qres.training.encoders import (
    ENCODERS,
    POOLINGS,
    EncoderConfig,
    combine_fields,
    rcnn_recurrence,
    rcnn_recurrence_scripted,
)
from tests.training.helpers import tensors, tiny_model

CASES = [(kind, pooling) for kind in ENCODERS for pooling in POOLINGS[kind]]


@pytest.mark.parametrize(("kind", "pooling"), CASES)
def test_a_padded_batch_gives_each_question_its_unpadded_vector(kind, pooling):
    model = tiny_model(kind, pooling)
    sequences = [[3, 4, 5], [7], [2, 3, 4, 5, 6, 7, 8, 9, UNK_ID], [9, 9]]
    with torch.no_grad():
        batched = model.title_encoder(*tensors(sequences, extra_padding=5))
        for row, sequence in enumerate(sequences):
            alone = model.title_encoder(*tensors([sequence]))[0]
            assert torch.allclose(batched[row], alone, atol=1e-6), (kind, pooling, row)


@pytest.mark.parametrize(("kind", "pooling"), CASES)
def test_padding_ids_other_than_pad_are_ignored_too(kind, pooling):
    """Whatever id sits under a zero mask, the vector is the same."""
    model = tiny_model(kind, pooling)
    ids, mask = tensors([[3, 4, 5], [7]], extra_padding=3)
    noisy = ids.clone()
    noisy[mask == 0] = 11
    with torch.no_grad():
        assert torch.allclose(model.title_encoder(ids, mask), model.title_encoder(noisy, mask))


@pytest.mark.parametrize("kind", ENCODERS)
def test_vectors_are_unit_length_and_have_the_configured_dim(kind):
    model = tiny_model(kind)
    with torch.no_grad():
        out = model(*tensors([[3, 4], [5, 6, 7]]), *tensors([[8], [9, 10, 11]]))
    assert out.shape == (2, model.config.output_dim)
    assert torch.allclose(out.norm(dim=1), torch.ones(2), atol=1e-5)


@pytest.mark.parametrize("recurrence", [rcnn_recurrence, rcnn_recurrence_scripted])
def test_rcnn_holds_its_state_on_masked_steps(recurrence):
    torch.manual_seed(1)
    batch, steps, hidden, ngram = 2, 5, 4, 2
    proj = torch.randn(batch, steps, hidden * (ngram + 1))
    u, gate_bias, out_bias = torch.randn(hidden, hidden), torch.randn(hidden), torch.randn(hidden)
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    states = recurrence(proj, u, gate_bias, out_bias, mask, ngram)
    assert torch.equal(states[0, 1], states[0, 0])
    assert torch.equal(states[0, 4], states[0, 2])
    assert not torch.equal(states[0, 2], states[0, 0])  # a real step does move it


@pytest.mark.parametrize("recurrence", [rcnn_recurrence, rcnn_recurrence_scripted])
def test_rcnn_follows_the_gated_decay_equations(recurrence):
    """One hand-computed step with n=2 (Lei et al. 2016, Sec. 4.1)."""
    torch.manual_seed(2)
    hidden = 3
    proj = torch.randn(1, 2, hidden * 3)
    u, bl, b = torch.randn(hidden, hidden), torch.randn(hidden), torch.randn(hidden)
    states = recurrence(proj, u, bl, b, torch.ones(1, 2), 2)
    wl, w1, w2 = proj[0].split(hidden, dim=1)
    h = torch.zeros(hidden)
    c1, c2 = torch.zeros(hidden), torch.zeros(hidden)
    for t in range(2):
        lam = torch.sigmoid(wl[t] + u @ h + bl)
        c1, c2 = lam * c1 + (1 - lam) * w1[t], lam * c2 + (1 - lam) * (c1 + w2[t])
        h = torch.tanh(c2 + b)
        assert torch.allclose(states[0, t], h, atol=1e-6)


def test_an_empty_field_is_left_out_of_the_average():
    model = tiny_model("gru")
    title_ids, title_mask = tensors([[3, 4, 5]])
    body_ids, body_mask = tensors([[]])
    with torch.no_grad():
        both = model(title_ids, title_mask, body_ids, body_mask)
        title_only = model.title_encoder(title_ids, title_mask)
        assert torch.allclose(both, title_only, atol=1e-6)
        assert torch.all(model.title_encoder(body_ids, body_mask) == 0)


def test_combine_averages_two_unit_vectors():
    t = torch.tensor([[1.0, 0.0]])
    b = torch.tensor([[0.0, 1.0]])
    ones = torch.ones(1, 1)
    expected = torch.tensor([[1.0, 1.0]]) / 2**0.5
    assert torch.allclose(combine_fields(t, ones, b, ones), expected)


def test_separate_fields_use_two_encoders_sharing_the_word_table():
    model = tiny_model("cnn", separate_fields=True)
    assert model.body_encoder is not None and model.body_encoder is not model.title_encoder
    assert model.body_encoder.embedding is model.title_encoder.embedding
    ids, mask = tensors([[3, 4, 5]])
    with torch.no_grad():
        assert not torch.allclose(
            model.encode_field("title", ids, mask), model.encode_field("body", ids, mask)
        )


def test_word_vectors_are_frozen_by_default_with_a_learned_unk():
    frozen = tiny_model("gru")
    assert not frozen.embedding.table.weight.requires_grad
    assert frozen.embedding.unk is not None and frozen.embedding.unk.requires_grad
    tuned = tiny_model("gru", finetune_embeddings=True)
    assert tuned.embedding.table.weight.requires_grad and tuned.embedding.unk is None
    zero_unk = tiny_model("gru", learned_unk=False)
    assert zero_unk.embedding.unk is None


def test_invalid_settings_are_refused():
    with pytest.raises(ValueError, match="pools by"):
        EncoderConfig("cnn", 10, 4, pooling="last")
    with pytest.raises(ValueError, match="unknown encoder"):
        EncoderConfig("transformer", 10, 4)
    assert EncoderConfig("bigru", 10, 4).output_dim == 400
    assert EncoderConfig("rcnn", 10, 4).hidden == 400
