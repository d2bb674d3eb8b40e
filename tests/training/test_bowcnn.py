"""BOW-CNN: IDF start, the hybrid score, the logistic loss, training, export and serving."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from qres.corpus.readers import Question
from qres.encoders.bowcnn_scorer import BOW_WEIGHTS_FILE, BowCnnScorer, is_bowcnn_model
from qres.encoders.runtime import EncoderError
from qres.training.bowcnn import (
    BowCnn,
    evaluate_scorer,
    idf_weights,
    load_bowcnn,
    logistic_pairwise_loss,
    train_bowcnn,
)
from qres.training.config import TrainError
from qres.training.data import encode_id_lists, load_dataset
from qres.training.export import export_onnx
from qres.training.rundir import history_table
from qres.training.train import train
from tests.training.helpers import FIXTURE, tiny_config, tiny_model


def bowcnn_config(**overrides):
    values = dict(encoder="bowcnn", hidden=12, epochs=3, lr=1e-2, bow_beta=0.4)
    values.update(overrides)
    return tiny_config(**values)


def test_idf_counts_each_question_once_and_gives_unseen_words_log_n():
    bags = [[2, 2, 3], [2, 4], [3, 1, 0], [5]]  # 4 questions; id 6 never occurs
    weights = idf_weights(bags, vocab_size=7)
    assert weights[2] == pytest.approx(math.log(4 / 2))  # twice in one bag counts once
    assert weights[3] == pytest.approx(math.log(4 / 2))
    assert weights[5] == pytest.approx(math.log(4 / 1))
    assert weights[6] == pytest.approx(math.log(4 / 1))
    assert weights[0] == 0.0 and weights[1] == 0.0  # <pad>, <unk>


def test_bow_weights_start_at_the_idf_of_the_fixture(tmp_path):
    # lr 0: the best checkpoint holds the initial weights.
    train_bowcnn(bowcnn_config(epochs=1, lr=0.0), tmp_path / "run", show_progress=False)
    model, vocab, run = load_bowcnn(tmp_path / "run")
    weights = model.bow_weight.detach().numpy()
    # Counted by hand (awk) in the fixture's 80 questions: questions holding the word.
    for word, df in (("wifi", 10), ("sound", 7), ("ubuntu", 11), ("how", 43)):
        assert weights[vocab.index[word]] == pytest.approx(math.log(80 / df)), word
    assert weights[0] == 0.0 and weights[1] == 0.0
    assert run["scorer"] == "bow-cnn" and run["beta"] == [0.4, pytest.approx(0.6)]
    assert run["train"]["encoder"] == "bowcnn" and run["encoder"]["kind"] == "cnn"


def test_the_score_is_beta_weighted_bow_and_cnn_cosines():
    torch.manual_seed(0)
    encoder = tiny_model("cnn")
    weights = np.random.default_rng(0).uniform(0.1, 3.0, 40).astype(np.float32)
    model = BowCnn(encoder, weights, beta=0.3).eval()
    question = ([5, 5, 7, 1], [9, 5, 12])  # (title ids, body ids); 1 = <unk>
    candidate = ([7, 9], [1, 30, 30, 31, 5])
    with torch.no_grad():
        bow, cnn = model(*encode_id_lists([question, candidate], "cpu"))
        got = model.similarity(bow, cnn, torch.tensor([0]))[0, 1].item()
        vectors = encoder(*encode_id_lists([question, candidate], "cpu")).numpy()

    def bag(pair):
        dense = np.zeros(40)
        for i in pair[0] + pair[1]:
            if i > 1:
                dense[i] += weights[i]
        return dense

    def cos(a, b):
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    expected = 0.3 * cos(bag(question), bag(candidate)) + 0.7 * cos(vectors[0], vectors[1])
    assert got == pytest.approx(expected, abs=1e-6)
    assert bow.shape[1] == len({5, 7, 9, 12, 30, 31})  # the batch's words, not the vocabulary


def test_the_loss_is_log_one_plus_exp_of_minus_gamma_delta_against_the_best_negative():
    positive = torch.tensor([0.6, -0.5])
    negatives = torch.tensor([[0.2, 0.5, -0.1], [0.5, 0.0, 0.0]])  # Δ = 0.1 and -1.0
    loss = logistic_pairwise_loss(positive, negatives, gamma=10.0).item()
    assert loss == pytest.approx((math.log1p(math.exp(-1.0)) + math.log1p(math.exp(10.0))) / 2)
    # Δ = -10 with γ = 10: exp(100) overflows float32, softplus does not.
    far = logistic_pairwise_loss(torch.tensor([-5.0]), torch.tensor([[5.0]]), 10.0).item()
    assert far == pytest.approx(100.0)


@pytest.fixture(scope="module")
def bowcnn_run(tmp_path_factory):
    """A 3-epoch BOW-CNN run on the fixture, exported."""
    root = tmp_path_factory.mktemp("bowcnn")
    run = train_bowcnn(bowcnn_config(patience=10), root / "run", show_progress=False)
    card = export_onnx(root / "run", root / "model")
    return root, run, card


def test_training_lowers_the_loss_and_moves_the_bow_weights_off_the_idf(bowcnn_run):
    root, run, _ = bowcnn_run
    losses = [r["loss"] for r in run["history"]]
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    model, vocab, _ = load_bowcnn(root / "run")
    data = load_dataset("askubuntu", FIXTURE)
    bags = []
    for qid in data.vocab_ids:
        title, body = vocab.encode_question(data.questions[qid].title, data.questions[qid].body)
        bags.append(title + body)
    idf = idf_weights(bags, len(vocab))
    moved = np.abs(model.bow_weight.detach().numpy() - idf)
    assert moved.max() > 1e-3
    assert moved[:2].max() == 0.0  # <pad> and <unk> are in no bag: never trained
    assert history_table(run).row_count == 3
    for key in ("best_epoch", "dev_metrics", "train_seconds"):
        assert run[key], key


def test_the_exported_scorer_matches_the_torch_model(bowcnn_run):
    root, run, card = bowcnn_run
    assert card["scorer"] == "bow-cnn" and card["beta"] == run["beta"]
    assert card["export"]["parity_max_abs_error"] < 1e-4
    assert is_bowcnn_model(root / "model")
    weights = np.load(root / "model" / BOW_WEIGHTS_FILE)
    model, vocab, _ = load_bowcnn(root / "run")
    assert weights.dtype == np.float32 and weights.shape == (len(vocab),)
    data = load_dataset("askubuntu", FIXTURE)
    questions = [data.questions[i] for i in ("100", "107", "170", "177", "184")] + [
        Question("x", "wifi zzunknown drops", ""),  # no body, an unknown word
        Question("y", "", "only a body about sound and wifi . " * 30),  # body cut at 100
        Question("z", "qqq xyzzy", "nothing known"),  # no known word: bow cosine 0
    ]
    scorer = BowCnnScorer.load(root / "model")
    got = scorer.similarity(questions[:3], questions)
    pairs = [vocab.encode_question(q.title, q.body) for q in questions]
    with torch.no_grad():
        bow, cnn = model(*encode_id_lists(pairs, "cpu"))
        expected = model.similarity(bow, cnn, torch.arange(3)).numpy()
    assert got.shape == (3, len(questions))
    np.testing.assert_allclose(got, expected, atol=1e-4)
    # The dev metrics of the served model are those training recorded for its best epoch.
    served = evaluate_scorer(data.dev, data.questions, scorer, skip_without_relevant=True)
    for name in ("MAP", "MRR", "P@1", "P@5"):
        assert served[name] == pytest.approx(run["dev_metrics"][name], abs=1e-3)


def test_a_tampered_bow_weights_file_is_refused(bowcnn_run, tmp_path):
    root, _, _ = bowcnn_run
    copy = tmp_path / "model"
    copy.mkdir()
    for path in (root / "model").iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    weights = np.load(copy / BOW_WEIGHTS_FILE)
    np.save(copy / BOW_WEIGHTS_FILE, weights * 2)
    with pytest.raises(EncoderError, match="bow_weights.npy: does not match its sha256"):
        BowCnnScorer.load(copy)


def test_a_normal_run_exports_no_bow_weights_and_is_no_bowcnn_model(tmp_path):
    train(tiny_config(encoder="cnn", epochs=1), tmp_path / "run", show_progress=False)
    card = export_onnx(tmp_path / "run", tmp_path / "model")
    assert not (tmp_path / "model" / BOW_WEIGHTS_FILE).exists()
    assert "scorer" not in card and "beta" not in card
    assert not is_bowcnn_model(tmp_path / "model")
    assert not is_bowcnn_model(tmp_path / "nowhere")
    with pytest.raises(EncoderError, match="not a BOW-CNN model"):
        BowCnnScorer.load(tmp_path / "model")
    with pytest.raises(TrainError, match="not a BOW-CNN run"):
        load_bowcnn(tmp_path / "run")


def test_resuming_a_bowcnn_run_continues_where_it_stopped(tmp_path):
    straight = train_bowcnn(bowcnn_config(epochs=2), tmp_path / "straight", show_progress=False)
    train_bowcnn(bowcnn_config(epochs=1), tmp_path / "resumed", show_progress=False)
    resumed = train_bowcnn(
        bowcnn_config(epochs=2), tmp_path / "resumed", resume=True, show_progress=False
    )
    assert [r["epoch"] for r in resumed["history"]] == [1, 2]
    for a, b in zip(straight["history"], resumed["history"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
        assert a["MAP"] == pytest.approx(b["MAP"], abs=1e-6)
    saved = json.loads((tmp_path / "resumed" / "run.json").read_text())
    assert saved["scorer"] == "bow-cnn"


def test_bad_settings_are_one_line_errors(tmp_path):
    with pytest.raises(TrainError, match="bow_beta"):
        train_bowcnn(bowcnn_config(bow_beta=1.5), tmp_path / "a", show_progress=False)
    with pytest.raises(TrainError, match="does not support tags"):
        train_bowcnn(bowcnn_config(tags=True), tmp_path / "b", show_progress=False)
    train(tiny_config(epochs=1), tmp_path / "plain", show_progress=False)
    with pytest.raises(TrainError, match="not a BOW-CNN run"):
        train_bowcnn(bowcnn_config(), tmp_path / "plain", resume=True, show_progress=False)


def test_search_and_index_refuse_a_bowcnn_model(bowcnn_run, run, tmp_path):
    """Search could apply only the CNN half of a BOW-CNN's score: it says so instead."""
    root, _, _ = bowcnn_run
    model = root / "model"
    files = json.loads((model / "model.json").read_text())["files"]
    assert files[BOW_WEIGHTS_FILE]["role"] == "bow_weights"
    corpus = tmp_path / "q.tsv"
    corpus.write_text("id\ttitle\tbody\nq1\twifi drops\tevery hour\n")
    assert run("index", corpus).exit_code == 0
    for args in (("search", "wifi", "--model", model), ("index", corpus, "--model", model)):
        result = run(*args)
        assert result.exit_code == 1, result.output
        assert "is a bow-cnn model: search ranks by the encoder's cosine" in result.output
        assert "--ranker bow-cnn" in result.output


def test_bowcnn_does_not_import_the_encoder_trainer():
    """No bowcnn <-> train import cycle: the shared run directory and loop live apart."""
    code = (
        "import sys, qres.training.bowcnn; "
        "print(sorted(m for m in sys.modules if m.startswith('qres.training.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "qres.training.loop" in loaded and "qres.training.rundir" in loaded
    assert "qres.training.train'" not in loaded
