"""The serving-side encoder (qres.encoders.runtime) and vocabulary (qres.encoders.vocab), without
torch.

The model directories here hold a hand-built ONNX graph — the normalised sum of the word
vectors of the unmasked tokens — so the expected vectors can be computed with numpy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qres.corpus.readers import Question
from qres.encoders.runtime import CARD_FORMAT, Encoder, EncoderError, fingerprint
from qres.encoders.vocab import PAD, UNK, Vocab, VocabError, pad_batch
from qres.text import tokenize

WORDS = ["how", "do", "i", "install", "wifi", "driver", "grub", "boot", "?", "the"]
DIM = 6


def bag_of_words_graph(table: np.ndarray) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Gather", ["table", "token_ids"], ["vectors"]),
        helper.make_node("Unsqueeze", ["mask", "last_axis"], ["mask3"]),
        helper.make_node("Mul", ["vectors", "mask3"], ["kept"]),
        helper.make_node("ReduceSum", ["kept", "time_axis"], ["total"], keepdims=0),
        helper.make_node("ReduceL2", ["total"], ["norm"], axes=[1], keepdims=1),
        helper.make_node("Max", ["norm", "eps"], ["safe_norm"]),
        helper.make_node("Div", ["total", "safe_norm"], ["vector"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bag_of_words",
        [
            helper.make_tensor_value_info("token_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("vector", TensorProto.FLOAT, ["batch", table.shape[1]])],
        [
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "last_axis"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "time_axis"),
            numpy_helper.from_array(np.array(1e-8, dtype=np.float32), "eps"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def write_model_dir(path: Path, seed: int = 0, title_max: int = 40, separate_body=False) -> dict:
    path.mkdir(parents=True, exist_ok=True)
    vocab = Vocab.from_words(WORDS)
    rng = np.random.default_rng(seed)
    tables = {"title": rng.normal(size=(len(vocab), DIM)).astype(np.float32)}
    tables["body"] = rng.normal(size=tables["title"].shape).astype(np.float32)
    graphs = {"title": "model.onnx", "body": "body.onnx" if separate_body else "model.onnx"}
    onnx.save(bag_of_words_graph(tables["title"]), path / "model.onnx")
    if separate_body:
        onnx.save(bag_of_words_graph(tables["body"]), path / "body.onnx")
    else:
        tables["body"] = tables["title"]
    vocab.save(path / "vocab.txt")
    files = list(dict.fromkeys(graphs.values()))
    card = {
        "format": CARD_FORMAT,
        "architecture": "bag-of-words (test)",
        "dim": DIM,
        "graphs": graphs,
        "max_title_tokens": title_max,
        "max_body_tokens": 100,
        "tokenizer": "qres.text.tokenize",
        "fingerprint": fingerprint(path, files),
    }
    (path / "model.json").write_text(json.dumps(card))
    return {"vocab": vocab, "tables": tables, "title_max": title_max}


def expected_vector(model: dict, question: Question) -> np.ndarray:
    def field(text, table, limit):
        ids = model["vocab"].ids(tokenize(text, limit))
        return table[ids].sum(0) / max(np.linalg.norm(table[ids].sum(0)), 1e-8)

    total = np.zeros(DIM, dtype=np.float32)
    if tokenize(question.title):
        total += field(question.title, model["tables"]["title"], model["title_max"])
    if tokenize(question.body):
        total += field(question.body, model["tables"]["body"], 100)
    return total / max(np.linalg.norm(total), 1e-8)


QUESTIONS = [
    Question("1", "How do I install the wifi driver?", "grub boot the driver " * 40),
    Question("2", "grub boot", ""),  # no body: the title alone
    Question("3", "", "install wifi"),  # no title: the body alone
    Question("4", "unknown words only zzz", "qqq"),
    Question("5", "", ""),  # nothing at all: a zero vector
]


@pytest.mark.parametrize("separate_body", [False, True])
def test_questions_are_encoded_as_the_average_of_title_and_body(tmp_path, separate_body):
    model = write_model_dir(tmp_path / "m", separate_body=separate_body)
    encoder = Encoder.load(tmp_path / "m")
    got = encoder.encode_questions(QUESTIONS, batch_size=2)
    assert got.shape == (5, DIM) and got.dtype == np.float32
    for row, question in enumerate(QUESTIONS):
        np.testing.assert_allclose(got[row], expected_vector(model, question), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got[:4], axis=1), 1.0, atol=1e-5)
    assert np.all(got[4] == 0)
    np.testing.assert_allclose(encoder.encode_questions(QUESTIONS, batch_size=256), got, atol=1e-6)


def test_titles_are_cut_to_the_cards_maximum(tmp_path):
    model = write_model_dir(tmp_path / "m", title_max=2)
    encoder = Encoder.load(tmp_path / "m")
    got = encoder.encode_questions([Question("1", "grub boot install wifi", "")])[0]
    np.testing.assert_allclose(
        got, expected_vector(model, Question("1", "grub boot", "")), atol=1e-5
    )


def test_a_query_is_encoded_as_a_title(tmp_path):
    write_model_dir(tmp_path / "m")
    encoder = Encoder.load(tmp_path / "m")
    query = encoder.encode_query("install wifi driver")
    assert query.shape == (DIM,)
    title = encoder.encode_questions([Question("q", "install wifi driver", "")])[0]
    np.testing.assert_array_equal(query, title)


def test_properties(tmp_path):
    write_model_dir(tmp_path / "m")
    encoder = Encoder.load(tmp_path / "m")
    assert encoder.dim == DIM
    assert encoder.fingerprint == encoder.card["fingerprint"] and len(encoder.fingerprint) == 64
    assert "CPUExecutionProvider" in encoder.providers
    encoder.card["dim"] = 99  # a copy: the encoder's own card is unchanged
    assert encoder.dim == DIM


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_missing_or_corrupt_model_directories_raise_one_line_errors(tmp_path):
    with pytest.raises(EncoderError, match="model directory not found") as err:
        Encoder.load(tmp_path / "nowhere")
    one_line(err)

    write_model_dir(tmp_path / "m")
    (tmp_path / "m" / "vocab.txt").unlink()
    with pytest.raises(EncoderError, match="vocab.txt: model file not found") as err:
        Encoder.load(tmp_path / "m")
    one_line(err)

    write_model_dir(tmp_path / "edited")
    with open(tmp_path / "edited" / "model.onnx", "ab") as f:
        f.write(b"x")
    with pytest.raises(EncoderError, match="fingerprint") as err:
        Encoder.load(tmp_path / "edited")
    one_line(err)

    write_model_dir(tmp_path / "card")
    (tmp_path / "card" / "model.json").write_text("{not json")
    with pytest.raises(EncoderError, match="not a valid model card") as err:
        Encoder.load(tmp_path / "card")
    one_line(err)

    write_model_dir(tmp_path / "nodim")
    card = json.loads((tmp_path / "nodim" / "model.json").read_text())
    del card["dim"]
    (tmp_path / "nodim" / "model.json").write_text(json.dumps(card))
    with pytest.raises(EncoderError, match="bad or missing 'dim'") as err:
        Encoder.load(tmp_path / "nodim")
    one_line(err)

    write_model_dir(tmp_path / "nocard")
    (tmp_path / "nocard" / "model.json").unlink()
    with pytest.raises(EncoderError, match="model card not found"):
        Encoder.load(tmp_path / "nocard")


@pytest.mark.parametrize("name", ["../outside/model.onnx", "/tmp/model.onnx", "a/../../m.onnx"])
def test_a_card_naming_a_file_outside_its_directory_is_refused(tmp_path, name):
    """Issue 34: `"graphs": {"title": "../outside/model.onnx"}` loaded a graph from another
    folder (the fingerprint, computed over the same paths, matched)."""
    write_model_dir(tmp_path / "m")
    (tmp_path / "outside").mkdir()
    (tmp_path / "m" / "model.onnx").rename(tmp_path / "outside" / "model.onnx")
    card = json.loads((tmp_path / "m" / "model.json").read_text())
    card["graphs"] = {"title": name, "body": name}
    if name.startswith("../"):
        card["fingerprint"] = fingerprint(tmp_path / "m", [name])
    (tmp_path / "m" / "model.json").write_text(json.dumps(card))
    with pytest.raises(EncoderError, match="is not a file of the model directory") as err:
        Encoder.load(tmp_path / "m")
    one_line(err)


def test_a_graph_that_onnxruntime_cannot_read_is_reported(tmp_path):
    write_model_dir(tmp_path / "m")
    (tmp_path / "m" / "model.onnx").write_bytes(b"this is not an onnx file")
    card = json.loads((tmp_path / "m" / "model.json").read_text())
    card["fingerprint"] = fingerprint(tmp_path / "m", ["model.onnx"])
    (tmp_path / "m" / "model.json").write_text(json.dumps(card))
    with pytest.raises(EncoderError, match="cannot load the ONNX graph") as err:
        Encoder.load(tmp_path / "m")
    one_line(err)


def test_vocab_round_trip_and_unknown_words(tmp_path):
    vocab = Vocab.from_words(["wifi", "grub", "wifi"])
    assert vocab.tokens == [PAD, UNK, "wifi", "grub"]
    vocab.save(tmp_path / "vocab.txt")
    loaded = Vocab.load(tmp_path / "vocab.txt")
    assert loaded.tokens == vocab.tokens
    assert loaded.encode("GRUB and WiFi") == [3, 1, 2]
    assert loaded.encode_question("grub grub grub", "wifi", title_max=2) == ([3, 3], [2])


def test_bad_vocab_files(tmp_path):
    (tmp_path / "v.txt").write_text("hello\nworld\n")
    with pytest.raises(VocabError, match="must start with"):
        Vocab.load(tmp_path / "v.txt")
    with pytest.raises(VocabError, match="not found"):
        Vocab.load(tmp_path / "missing.txt")


def test_pad_batch_right_pads_and_keeps_at_least_one_column():
    ids, mask = pad_batch([[5, 6, 7], [8]])
    assert ids.dtype == np.int64 and mask.dtype == np.float32
    np.testing.assert_array_equal(ids, [[5, 6, 7], [8, 0, 0]])
    np.testing.assert_array_equal(mask, [[1, 1, 1], [1, 0, 0]])
    ids, mask = pad_batch([[]])
    assert ids.shape == (1, 1) and mask.sum() == 0


def test_serving_does_not_import_torch():
    code = "import sys, qres.encoders.runtime, qres.encoders.vocab; print('torch' in sys.modules)"
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
