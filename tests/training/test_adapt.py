"""Adversarial domain adaptation (``qres train --adapt-to``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from qres.corpus.readers import CorpusError
from qres.encoders.vocab import Vocab
from qres.training.adapt import DomainClassifier, load_target, probe_accuracy, reverse_gradient
from qres.training.train import train
from tests.training.helpers import tensors, tiny_config, tiny_model

BREAD = [
    ("1", "bread dough does not rise", "my yeast dough stays flat after two hours"),
    ("2", "why is my dough flat", "the bread dough never rises even with fresh yeast"),
    ("3", "how long to rest steak", "should a steak rest before slicing it"),
    ("4", "resting meat after grilling", "how many minutes should grilled meat rest"),
    ("5", "cast iron pan rusted", "how do i remove rust from a cast iron skillet"),
    ("6", "freeze fresh basil", "what is the best way to freeze basil leaves"),
    ("7", "substitute for buttermilk", "can i use milk and lemon instead of buttermilk"),
    ("8", "sharpen a kitchen knife", "which whetstone grit should i use for a chef knife"),
    ("9", "rice is sticky", "my rice turns into a sticky mush every time"),
    ("10", "caramel crystallised", "the sugar in my caramel turned grainy"),
]


def write_android(folder, pos="1 2\n3 4\n", neg="1 5\n1 6\n3 7\n3 8\n"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.tsv").write_text("".join(f"{i}\t{t}\t{b}\n" for i, t, b in BREAD))
    (folder / "dev.pos.txt").write_text(pos)
    (folder / "dev.neg.txt").write_text(neg)
    return folder


def test_gradient_reversal_is_the_identity_forward_and_minus_lambda_backward():
    x = torch.randn(4, 3, requires_grad=True)
    y = reverse_gradient(x, 0.25)
    assert torch.equal(y, x)
    (y * torch.arange(12.0).view(4, 3)).sum().backward()
    assert torch.allclose(x.grad, -0.25 * torch.arange(12.0).view(4, 3))


def test_the_domain_loss_pushes_the_encoder_against_the_classifier():
    """Same classifier weights: reversal gives the encoder -λ times the plain gradient,
    and leaves the classifier's own gradient untouched."""
    model = tiny_model("gru")
    source_ids, source_mask = tensors([[3, 4, 5], [6, 7]])
    target_ids, target_mask = tensors([[8, 9], [10, 11, 12]])
    adversary = DomainClassifier(model.config.output_dim, scale=0.3)
    plain = copy.deepcopy(adversary)
    plain.scale = -1.0  # -(-1) = +1: the ordinary gradient

    def grads(classifier):
        model.zero_grad()
        classifier.zero_grad()
        source = model(source_ids, source_mask, source_ids, source_mask)
        target = model(target_ids, target_mask, target_ids, target_mask)
        classifier.loss(source, target)[0].backward()
        encoder = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return encoder, [p.grad.clone() for p in classifier.parameters()]

    reversed_encoder, reversed_classifier = grads(adversary)
    plain_encoder, plain_classifier = grads(plain)
    assert reversed_encoder.keys() == plain_encoder.keys() and reversed_encoder
    for name, grad in plain_encoder.items():
        assert torch.allclose(reversed_encoder[name], -0.3 * grad, atol=1e-7), name
    assert any(g.abs().sum() > 0 for g in plain_encoder.values())
    for a, b in zip(reversed_classifier, plain_classifier, strict=True):
        assert torch.allclose(a, b)


def test_an_adapted_run_learns_and_reports_the_domain_classifier_and_target_auc(tmp_path):
    target = write_android(tmp_path / "android")
    config = tiny_config(adapt_to=str(target), adapt_lambda=0.5, domain_batch=8, epochs=3)
    run = train(config, tmp_path / "run", show_progress=False)
    history = run["history"]
    assert history[-1]["loss"] < history[0]["loss"]
    for record in history:
        assert 0 <= record["domain_heldout_accuracy"] <= 100
        assert 0 <= record["target_AUC0.05"] <= 100
        assert record["domain_loss"] > 0
        assert 0 <= record["domain_probe_accuracy"] <= 100
    assert run["training"]["target"]["questions"] == len(BREAD)
    vocab = Vocab.load(tmp_path / "run" / "vocab.txt")
    assert "dough" in vocab.index  # target words enter the vocabulary


def test_lambda_zero_leaves_the_encoder_as_direct_transfer_trains_it(tmp_path):
    """λ = 0: the classifier still learns, but no domain gradient reaches the encoder."""
    target = write_android(tmp_path / "android")
    direct = tiny_config(adapt_to=str(target), adapt_lambda=0.0, domain_batch=8, epochs=1)
    adapted = tiny_config(adapt_to=str(target), adapt_lambda=1.0, domain_batch=8, epochs=1)
    a = train(direct, tmp_path / "direct", show_progress=False)
    b = train(adapted, tmp_path / "adapted", show_progress=False)
    assert a["history"][0]["loss"] != b["history"][0]["loss"]


def test_pair_files_naming_unknown_questions_are_refused(tmp_path):
    folder = write_android(tmp_path / "android", pos="1 2\n1 99\n")
    with pytest.raises(CorpusError, match=r"dev.pos.txt.*99"):
        load_target(folder)


def test_a_plain_corpus_file_is_a_target_without_labels(tmp_path):
    path = tmp_path / "cooking.jsonl"
    path.write_text(
        '{"id": "a", "title": "t", "body": "b"}\n{"id": "b", "title": "u", "body": ""}\n'
    )
    target = load_target(path)
    assert sorted(target.questions) == ["a", "b"] and not target.pairs and not target.ranking


def test_the_stackexchange_cooking_sample_is_a_target_with_two_labelled_queries(shared_data):
    target = load_target(shared_data / "stackexchange-cooking-sample" / "subtask_e_sample.xml")
    assert len(target.ranking) == 26  # distinct ORGQ_IDs in the file (its readme says 27)
    assert sum(len(q.relevant) for q in target.ranking) == 2  # its two "Related" pairs
    assert all(q.id in target.questions for q in target.ranking)
    assert len(target.questions) > 26 and not target.pairs


def test_the_probe_separates_separable_domains_and_not_identical_ones():
    rng = np.random.default_rng(0)
    source = rng.normal(size=(60, 5))
    assert probe_accuracy(source, rng.normal(size=(60, 5)) + 3.0) > 95
    assert 30 < probe_accuracy(source, rng.normal(size=(60, 5))) < 70
