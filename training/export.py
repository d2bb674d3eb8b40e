"""Export a trained encoder to an ONNX model directory that ``qres.encoders.runtime.Encoder``
serves.

Graphs are exported with torch's TorchScript-based exporter (``dynamo=False``): the RCNN
recurrence is a scripted loop (``qres.training.encoders.rcnn_recurrence``) and becomes an ONNX
``Loop`` over however many tokens come in, and nn.GRU/nn.LSTM become ONNX GRU/LSTM nodes,
so no graph is specialised to the length it was traced at. Batch and length are dynamic;
the runtime cuts titles and bodies to the card's maximum lengths, as training did.

With separate title and body encoders two graphs are written, ``model.onnx`` (titles) and
``body.onnx``, each with the same inputs and output; the card's ``graphs`` names them.
Every export is checked: onnxruntime must match torch within 1e-4 on random batches of
1, 3 and 16 rows and lengths 1, 7 and the maximum.

A BOW-CNN run (``qres.training.bowcnn``) exports its CNN encoder this way and adds its learned
bag-of-words weights, ``bow_weights.npy``, for ``qres.encoders.bowcnn_scorer.BowCnnScorer``.
"""

from __future__ import annotations

import io
import platform
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from qres.encoders.bowcnn_scorer import SCORER
from qres.encoders.manifest import (
    BOW_WEIGHTS_FILE,
    OPTIONAL_FILES,
    core_roles,
    manifest,
    write_card,
)
from qres.encoders.runtime import CARD_FORMAT, VOCAB_FILE, fingerprint
from qres.text import BODY_MAX_TOKENS, TITLE_MAX_TOKENS
from qres.training.bowcnn import is_bowcnn_run, load_bowcnn
from qres.training.encoders import FieldEncoder
from qres.training.rundir import load_trained

OPSET = 17
PARITY_TOLERANCE = 1e-4
PARITY_BATCHES = (1, 3, 16)


class ExportError(RuntimeError):
    """The run cannot be exported, or the exported graph disagrees with torch."""


class _FieldGraph(nn.Module):
    """The exported signature: (token_ids, mask) → vector."""

    def __init__(self, encoder: FieldEncoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, token_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(token_ids, mask)


def export_field_encoder(encoder: FieldEncoder, path: str | Path) -> None:
    """Write one field encoder as an ONNX graph with dynamic batch and length."""
    encoder = encoder.eval().cpu()
    ids = torch.tensor([[2, 3, 4], [5, 6, 0]], dtype=torch.int64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    Path(path).write_bytes(onnx_graph(_FieldGraph(encoder), (ids, mask), ["token_ids", "mask"]))


def onnx_graph(module: nn.Module, inputs: tuple, input_names: list[str]) -> bytes:
    """``module`` as ONNX bytes: inputs of dynamic batch and length, one output "vector"
    of dynamic batch (qres's encoder graph contract)."""
    dynamic = {0: "batch", 1: "length"}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        torch.onnx.export(
            module,
            inputs,
            buffer,
            dynamo=False,
            input_names=input_names,
            output_names=["vector"],
            dynamic_axes={**{name: dynamic for name in input_names}, "vector": {0: "batch"}},
            opset_version=OPSET,
        )
    return buffer.getvalue()


def parity_error(
    encoder: FieldEncoder,
    path: str | Path,
    lengths: tuple[int, ...],
    batches: tuple[int, ...] = PARITY_BATCHES,
    seed: int = 0,
) -> float:
    """Largest |onnxruntime − torch| over random right-padded batches of each size/length."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(seed)
    vocab_size = encoder.embedding.table.num_embeddings
    encoder = encoder.eval().cpu()
    worst = 0.0
    for batch in batches:
        for length in lengths:
            ids = torch.randint(0, vocab_size, (batch, length), generator=generator)
            real = torch.randint(1, length + 1, (batch,), generator=generator)
            real[0] = length
            mask = (torch.arange(length)[None, :] < real[:, None]).float()
            with torch.no_grad():
                expected = encoder(ids, mask).numpy()
            got = session.run(["vector"], {"token_ids": ids.numpy(), "mask": mask.numpy()})[0]
            worst = max(worst, float(np.abs(expected - got).max()))
    return worst


def export_onnx(source: str | Path, out_dir: str | Path) -> dict:
    """Export a run directory (its best checkpoint) or a checkpoint file; returns the card.

    A BOW-CNN run (run.json ``"scorer": "bow-cnn"``) exports its CNN encoder the same way,
    plus ``bow_weights.npy`` (float32 [vocab]) and the card fields ``scorer`` and ``beta``
    that ``qres.encoders.bowcnn_scorer.BowCnnScorer`` reads. The card's manifest lists every file
    written
    (:mod:`qres.encoders.manifest`).
    """
    if is_bowcnn_run(source):
        return _export_bowcnn(source, out_dir)
    model, vocab, run = load_trained(source)
    return _export_encoder(model, vocab, run, out_dir)


def _export_bowcnn(source: str | Path, out_dir: str | Path) -> dict:
    model, vocab, run = load_bowcnn(source)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = model.bow_weight.detach().cpu().numpy().astype(np.float32)
    np.save(out_dir / BOW_WEIGHTS_FILE, weights)
    extra = {
        "scorer": SCORER,
        "beta": list(model.beta),
        "similarity": "beta[0] * cos(tf * bow_weights over title+body ids, pad and unk left "
        "out) + beta[1] * cos(vector)",
    }
    return _export_encoder(
        model.encoder, vocab, run, out_dir, extra, {BOW_WEIGHTS_FILE: "bow_weights"}
    )


def _export_encoder(
    model,
    vocab,
    run: dict,
    out_dir: str | Path,
    extra: dict | None = None,
    components: dict[str, str] | None = None,
):
    """Write the graph(s), vocabulary and card of a ``QuestionEncoder``; returns the card.
    ``components``: other files already written to ``out_dir``, by role, for the manifest."""
    model = model.eval().cpu()
    config = model.config
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    graphs = {
        "title": "model.onnx",
        "body": "body.onnx" if config.separate_fields else "model.onnx",
    }
    title_max = run.get("title_max", TITLE_MAX_TOKENS)
    body_max = run.get("body_max", BODY_MAX_TOKENS)
    lengths = (1, 7, max(title_max, body_max))
    worst = 0.0
    started = time.perf_counter()
    for field, name in graphs.items():
        if field == "body" and name == graphs["title"]:
            continue
        encoder = model.body_encoder if field == "body" else model.title_encoder
        export_field_encoder(encoder, out_dir / name)
        worst = max(worst, parity_error(encoder, out_dir / name, lengths))
    if worst > PARITY_TOLERANCE:
        raise ExportError(f"ONNX output differs from torch by {worst:.2e} (> {PARITY_TOLERANCE})")
    vocab.save(out_dir / VOCAB_FILE)
    files = list(dict.fromkeys([graphs["title"], graphs["body"]]))
    card = {
        "format": CARD_FORMAT,
        "architecture": config.kind,
        "dim": config.output_dim,
        "encoder": config.to_dict(),
        "graphs": graphs,
        "inputs": {"token_ids": "int64 [batch, length]", "mask": "float32 [batch, length]"},
        "output": "vector: float32 [batch, dim], L2-normalised",
        "combine": "mean of the title and body unit vectors (empty field left out), normalised",
        "tokenizer": "qres.text.tokenize",
        "vocab_size": len(vocab),
        "max_title_tokens": title_max,
        "max_body_tokens": body_max,
        "training": {**run.get("training", {}), "settings": run.get("train", {})},
        "dev_metrics": run.get("dev_metrics", {}),
        "best_epoch": run.get("best_epoch"),
        "train_seconds": run.get("train_seconds"),
        "history": run.get("history", []),
        "export": {
            "opset": OPSET,
            "torch": torch.__version__,
            "parity_max_abs_error": worst,
            "seconds": round(time.perf_counter() - started, 2),
            "python": platform.python_version(),
        },
        "fingerprint": fingerprint(out_dir, files),
        **(extra or {}),
    }
    # A component of an earlier export in out_dir belongs to another model.
    for stale in OPTIONAL_FILES.keys() - (components or {}).keys():
        (out_dir / stale).unlink(missing_ok=True)
    card["files"] = manifest(out_dir, {**core_roles(card), **(components or {})})
    write_card(out_dir, card)
    return card
