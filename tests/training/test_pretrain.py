"""Encoder-decoder pre-training (``qres train --pretrain``)."""

from __future__ import annotations

import json
import math

import torch

from qres.encoders.vocab import Vocab
from qres.training.data import TokenizedQuestions, load_dataset
from qres.training.pretrain import TitleDecoder, heldout_perplexity, pretrain, split_heldout
from qres.training.rundir import PRETRAINED_FILE
from qres.training.train import train
from tests.training.helpers import FIXTURE, tiny_config, tiny_model


def test_a_decoder_that_knows_nothing_has_the_perplexity_of_its_class_count():
    model = tiny_model("gru")
    decoder = TitleDecoder(model, target_ids=[5, 6, 7])  # + <unk> and <eos>: 5 classes
    with torch.no_grad():
        decoder.output.weight.zero_()
        decoder.output.bias.zero_()
    tokenized = _FakeTokens({"a": ([5, 9, 6], [7, 8]), "b": ([6], [5, 5, 5])})
    ppl = heldout_perplexity(model, decoder, [("a", "body"), ("b", "body")], tokenized, "cpu")
    assert math.isclose(ppl, 5.0, rel_tol=1e-5)


def test_the_decoder_predicts_each_title_word_then_eos_and_unk_for_rare_words():
    model = tiny_model("gru")
    decoder = TitleDecoder(model, target_ids=[5, 6])
    title = torch.tensor([[5, 9, 6, 0]])  # 9 is outside the decoder's words; 0 is padding
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    context = torch.zeros(1, model.config.output_dim)
    nll, tokens = decoder(context, title, mask)
    assert tokens.item() == 4  # three words and <eos>; padding is not predicted
    logits = decoder.output(decoder.core(_decoder_inputs(decoder, context, title), _ones(5)))
    expected = torch.nn.functional.cross_entropy(logits[0, :4], torch.tensor([2, 0, 3, 1]))
    assert math.isclose(nll.item(), 4 * expected.item(), rel_tol=1e-5)


def test_pretraining_lowers_the_loss_and_the_heldout_perplexity_and_moves_the_encoder():
    data = load_dataset("askubuntu", FIXTURE)
    vocab = Vocab.from_words(sorted({w for q in data.questions.values() for w in q.text.split()}))
    config = tiny_config(pretrain_epochs=6, lr=5e-3)
    torch.manual_seed(0)
    from qres.training.encoders import EncoderConfig, QuestionEncoder

    model = QuestionEncoder(
        EncoderConfig("gru", len(vocab), 16, hidden=12, dropout=0.0, finetune_embeddings=True)
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tokenized = TokenizedQuestions(data.questions, vocab, 40, 100)
    history = pretrain(model, data.vocab_ids, tokenized, config, torch.device("cpu"))
    assert history[-1]["loss"] < 0.9 * history[0]["loss"], history
    assert history[-1]["heldout_perplexity"] < history[0]["heldout_perplexity"], history
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert any("title_encoder.core" in k for k in changed)


def test_heldout_questions_are_kept_out_of_pretraining():
    ids = [str(i) for i in range(100)]
    kept, held = split_heldout(ids, seed=0)
    assert len(held) == 5 and not set(kept) & set(held) and len(kept) + len(held) == 100
    assert split_heldout(ids, seed=0) == (kept, held)


def test_pretrain_run_records_perplexity_and_dev_metrics_before_and_after(tmp_path):
    run = train(tiny_config(pretrain_epochs=2, epochs=1), tmp_path / "run", show_progress=False)
    pre = run["pretrain"]
    assert [r["epoch"] for r in pre["history"]] == [1, 2]
    assert all(r["heldout_perplexity"] > 1 for r in pre["history"])
    assert set(pre["dev_before_pretraining"]) == set(pre["dev_after_pretraining"]) >= {"MAP"}
    assert (tmp_path / "run" / PRETRAINED_FILE).exists()
    saved = json.loads((tmp_path / "run" / "run.json").read_text())
    assert saved["pretrain"]["history"] == pre["history"]
    # fine-tuning started from the pre-trained encoder, not from a fresh one
    plain = train(tiny_config(epochs=1), tmp_path / "plain", show_progress=False)
    assert run["history"][0]["loss"] != plain["history"][0]["loss"]


class _FakeTokens:
    def __init__(self, ids):
        self._ids = ids

    def ids(self, qid):
        return self._ids[qid]


def _ones(n):
    return torch.ones(1, n)


def _decoder_inputs(decoder, context, title):
    inputs = torch.cat([torch.zeros(1, 1, dtype=torch.long), title], 1)
    x = decoder.embedding(inputs)
    return torch.cat([x, context.unsqueeze(1).expand(-1, x.size(1), -1)], 2)
