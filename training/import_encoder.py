"""Turn a sentence-transformers model directory into a qres model directory.

The exported graph is the model's transformer with its pooling (mean or CLS, as the
model's ``1_Pooling/config.json`` says) and L2 normalisation inside: inputs ``input_ids``
and ``attention_mask`` (int64 [batch, length], both axes dynamic), output ``vector``
(float32 [batch, dim]). The tokenizer is the model's Hugging Face ``tokenizers`` file, so
serving needs onnxruntime and ``tokenizers``, never torch or transformers. The card is the
one GRU models carry (:mod:`qres.encoders.runtime`), with ``architecture: "transformer"``.

Every import is checked: the directory is loaded back through :class:`qres.encoders.runtime.Encoder`
and must match sentence-transformers within 1e-4 on texts of 1, 7 and ``max_seq_tokens``
tokens (and longer ones, cut). ``quantize="int8"`` adds onnxruntime dynamic quantisation of
the weights (MatMul/Gemm to int8); its parity is reported, not enforced.

A question's vector mixes in its title alone (the card's ``title_weight``,
:data:`TITLE_WEIGHT` unless told; :mod:`qres.encoders.runtime`), which the parity check does
not see: it encodes texts without a body, whose vector is the text's either way.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from qres.encoders.card import card_fingerprint
from qres.encoders.manifest import core_roles, manifest, write_card
from qres.encoders.runtime import CARD_FORMAT, TRANSFORMER, Encoder
from qres.training.export import OPSET, onnx_graph

PARITY_TOLERANCE = 1e-4
TOKENIZER_FILE = "tokenizer.json"
GRAPH_FILE = "model.onnx"
# The best on the travel forum's train split for all-MiniLM-L6-v2 and for it with
# all-mpnet-base-v2, zero-shot, of 0 to 0.5 (benchmarks/title_weight.py, docs/real-forums.md).
TITLE_WEIGHT = 0.2
COMBINE = (
    "title and body joined into one text, cut to max_seq_tokens; with a body, mixed with the "
    "title alone: normalise((1 - title_weight) * v(text) + title_weight * v(title))"
)


class EncoderImportError(RuntimeError):
    """The model cannot be imported, or the ONNX graph disagrees with sentence-transformers."""


class _PooledGraph(nn.Module):
    """(input_ids, attention_mask) → unit vector, as the sentence-transformers pipeline."""

    def __init__(self, transformer: nn.Module, pooling: str, uses_token_types: bool):
        super().__init__()
        self.transformer, self.pooling = transformer, pooling
        self.uses_token_types = uses_token_types

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.uses_token_types:
            inputs["token_type_ids"] = torch.zeros_like(input_ids)
        hidden = self.transformer(**inputs).last_hidden_state
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, p=2, dim=1)


def load_sentence_transformer(source: str | Path):
    """A sentence-transformers model from a local directory, never from the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    source = Path(source)
    if not (source / "modules.json").is_file():
        raise EncoderImportError(f"{source}: not a sentence-transformers model (no modules.json)")
    try:
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging
    except ImportError:
        raise EncoderImportError(
            "sentence-transformers is not installed: pip install 'qres[train]'"
        ) from None

    transformers_logging.disable_progress_bar()  # qres prints one line per import
    return SentenceTransformer(str(source), device="cpu", local_files_only=True)


def _pooling(model, source: Path) -> str:
    """``mean`` or ``cls``, from the model's own Pooling configuration."""
    kinds = [type(m).__name__ for m in model]
    if kinds[:2] != ["Transformer", "Pooling"] or set(kinds[2:]) - {"Normalize"}:
        raise EncoderImportError(
            f"{source}: modules {kinds}: only Transformer, Pooling, Normalize are supported"
        )
    modules = json.loads((source / "modules.json").read_text(encoding="utf-8"))
    config = json.loads((source / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
    chosen = [k for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
    if isinstance(config.get("pooling_mode"), str):  # sentence-transformers 6 writes this
        chosen = [
            {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token"}.get(
                config["pooling_mode"], config["pooling_mode"]
            )
        ]
    if chosen == ["pooling_mode_mean_tokens"]:
        return "mean"
    if chosen == ["pooling_mode_cls_token"]:
        return "cls"
    raise EncoderImportError(f"{source}: pooling {chosen} is not supported (mean or cls alone)")


def texts_of_lengths(tokenizer_file: str | Path, lengths) -> list[str]:
    """Texts of these many tokens, special tokens included; 1 means one word (the fewest)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    words = "how do i renew my residence permit in doha before it expires next month".split()
    texts = []
    for length in lengths:
        n = 1
        text = words[0]
        while len(tokenizer.encode(text).ids) < length:
            n += 1
            text = " ".join(words[i % len(words)] for i in range(n))
        texts.append(text)
    return texts


def import_sentence_transformer(
    source: str | Path,
    out_dir: str | Path,
    quantize: str | None = None,
    title_weight: float = TITLE_WEIGHT,
) -> dict:
    """Write ``out_dir`` (model.onnx, tokenizer.json, model.json); returns the card."""
    _check_title_weight(title_weight)
    source, out_dir = Path(source), Path(out_dir)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    model = load_sentence_transformer(source).eval()
    pooling = _pooling(model, source)
    transformer = model[0].auto_model.eval()
    max_tokens = int(model.max_seq_length)
    hf_tokenizer = model.tokenizer
    out_dir.mkdir(parents=True, exist_ok=True)
    backend = hf_tokenizer.backend_tokenizer
    backend.no_padding()
    backend.no_truncation()
    backend.save(str(out_dir / TOKENIZER_FILE))
    started = time.perf_counter()
    uses_token_types = "token_type_ids" in hf_tokenizer.model_input_names
    graph = _PooledGraph(transformer, pooling, uses_token_types).eval()
    ids = torch.tensor([[101, 2129, 2079, 102], [101, 2129, 102, 0]], dtype=torch.int64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.int64)
    with torch.no_grad():
        onnx = onnx_graph(graph, (ids, mask), ["input_ids", "attention_mask"])
    (out_dir / GRAPH_FILE).write_bytes(onnx)
    if quantize == "int8":
        _quantize_int8(out_dir / GRAPH_FILE)
    elif quantize is not None:
        raise EncoderImportError(f"unknown quantisation {quantize!r} (int8)")
    card = {
        "format": CARD_FORMAT,
        "architecture": TRANSFORMER,
        "dim": _dimension(model),
        "encoder": {
            "kind": TRANSFORMER,
            "base": transformer.config.model_type,
            "layers": int(getattr(transformer.config, "num_hidden_layers", 0)),
            "hidden": int(getattr(transformer.config, "hidden_size", 0)),
            "pooling": pooling,
            "normalize": True,
            "quantize": quantize,
        },
        "graphs": {"title": GRAPH_FILE, "body": GRAPH_FILE},
        "inputs": {"input_ids": "int64 [batch, length]", "attention_mask": "int64 [batch, length]"},
        "output": "vector: float32 [batch, dim], L2-normalised",
        "combine": COMBINE,
        "title_weight": title_weight,
        "tokenizer": "tokenizers (Hugging Face)",
        "tokenizer_file": TOKENIZER_FILE,
        "pad_token_id": int(hf_tokenizer.pad_token_id or 0),
        "vocab_size": int(backend.get_vocab_size()),
        "max_seq_tokens": max_tokens,
        "max_title_tokens": max_tokens,
        "max_body_tokens": max_tokens,
        "training": {"source": str(source.resolve()), "imported_from": "sentence-transformers"},
    }
    card["fingerprint"] = card_fingerprint(out_dir, card)
    _write_card(out_dir, card)
    worst = parity_error(model, out_dir)
    if quantize is None and worst > PARITY_TOLERANCE:
        raise EncoderImportError(
            f"ONNX output differs from sentence-transformers by {worst:.2e} (> {PARITY_TOLERANCE})"
        )
    card["export"] = {
        "opset": OPSET,
        "torch": torch.__version__,
        "parity_max_abs_error": worst,
        "parity_texts_tokens": [1, 7, max_tokens, 2 * max_tokens],
        "seconds": round(time.perf_counter() - started, 2),
        "python": platform.python_version(),
    }
    _write_card(out_dir, card)
    return card


def derive_encoder(
    source_dir: str | Path,
    out_dir: str | Path,
    quantize: str | None = None,
    max_tokens: int | None = None,
    title_weight: float | None = None,
) -> dict:
    """A cheaper variant of an imported transformer (a qres model directory), without torch:
    its graph quantised (``int8``: onnxruntime dynamic quantisation) and/or its input cut to
    ``max_tokens`` (a question is then its title and the first body tokens that fit), and
    with ``title_weight`` (None: the source's). The cut is written into ``tokenizer.json``
    too, so the variant has its own fingerprint: vectors of a cut model are never mixed with
    the whole model's. Returns the card."""
    from tokenizers import Tokenizer

    from qres.encoders.manifest import open_model

    source, out_dir = open_model(source_dir), Path(out_dir)
    card = {k: v for k, v in source.card.items() if k not in ("files", "fingerprint")}
    if card.get("architecture") != TRANSFORMER:
        raise EncoderImportError(f"{source.path}: not a transformer model directory")
    native = int(card["max_seq_tokens"])
    if max_tokens is not None and not 2 < max_tokens <= native:
        raise EncoderImportError(f"--max-tokens must be between 3 and {native}, not {max_tokens}")
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source.path / GRAPH_FILE, out_dir / GRAPH_FILE)
    tokenizer = Tokenizer.from_file(str(source.path / card["tokenizer_file"]))
    if max_tokens is not None and max_tokens < native:
        tokenizer.enable_truncation(max_tokens)
        card["max_seq_tokens"] = card["max_title_tokens"] = card["max_body_tokens"] = max_tokens
    tokenizer.save(str(out_dir / TOKENIZER_FILE))
    card["tokenizer_file"] = TOKENIZER_FILE
    if quantize == "int8" and card["encoder"].get("quantize") != "int8":
        _quantize_int8(out_dir / GRAPH_FILE)
        card["encoder"] = {**card["encoder"], "quantize": "int8"}
    elif quantize not in (None, "int8"):
        raise EncoderImportError(f"unknown quantisation {quantize!r} (int8)")
    if title_weight is not None:
        _check_title_weight(title_weight)
        card["title_weight"], card["combine"] = title_weight, COMBINE
    card["training"] = {**card.get("training", {}), "derived_from": source.card["fingerprint"]}
    card["fingerprint"] = card_fingerprint(out_dir, card)
    _write_card(out_dir, card)
    return card


def set_title_weight(model_dir: str | Path, weight: float = TITLE_WEIGHT) -> dict:
    """Give an imported transformer a new ``title_weight`` in place: its card and so its
    fingerprint change, its graph and tokenizer do not, and a fusion fitted with its former
    vectors is removed (fit one again with ``qres tune-fusion``). Returns the card."""
    from qres.encoders.manifest import open_model

    _check_title_weight(weight)
    model = open_model(model_dir)
    card = dict(model.card)
    if card.get("architecture") != TRANSFORMER:
        raise EncoderImportError(f"{model.path}: not a transformer model directory")
    card["title_weight"], card["combine"] = weight, COMBINE
    card["fingerprint"] = card_fingerprint(model.path, card)
    card["files"] = manifest(model.path, {n: r for n, r in model.files.items() if r != "fusion"})
    write_card(model.path, card)
    for name in {n for n, r in model.files.items() if r == "fusion"}:
        (model.path / name).unlink()
    return card


def _check_title_weight(weight: float) -> None:
    if not 0 <= weight < 1:
        raise EncoderImportError(f"the title weight must be in [0, 1), not {weight}")


def parity_error(model, out_dir: Path) -> float:
    """Largest |qres Encoder − sentence-transformers| over texts of 1, 7, max and 2·max tokens,
    encoded one by one and as one padded batch."""
    encoder = Encoder.load(out_dir, providers=["CPUExecutionProvider"])
    max_tokens = int(model.max_seq_length)
    texts = texts_of_lengths(out_dir / TOKENIZER_FILE, (1, 7, max_tokens, 2 * max_tokens))
    with torch.no_grad():
        expected = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    alone = np.stack([encoder.encode_query(t) for t in texts])
    batched = encoder.encode_texts(texts)
    return float(max(np.abs(alone - expected).max(), np.abs(batched - expected).max()))


def _dimension(model) -> int:
    """The sentence vector size (the method was renamed in sentence-transformers 6)."""
    method = getattr(model, "get_embedding_dimension", None)
    return int(method() if method else model.get_sentence_embedding_dimension())


def _quantize_int8(path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = path.with_suffix(".fp32.onnx")
    shutil.move(path, fp32)
    # The quantiser logs advice ("consider pre-processing") on the root logger, which reached
    # users as a bare "WARNING:root:" line; the card records what was done instead.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(str(fp32), str(path), weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)
        fp32.unlink(missing_ok=True)


def _write_card(out_dir: Path, card: dict) -> None:
    """The card with its manifest (every file and its sha256, :mod:`qres.encoders.manifest`)."""
    card["files"] = manifest(out_dir, core_roles(card))
    write_card(out_dir, card)
