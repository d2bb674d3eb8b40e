"""An int8 graph rewritten so that onnxruntime's CUDA provider runs all of it.

``qres import-encoder fast`` quantizes MiniLM dynamically (onnxruntime's ``quantize_dynamic``):
each matrix product becomes ``DynamicQuantizeLinear`` on its input (uint8 values, a scale and a
zero point computed from the whole run's range) and ``MatMulInteger`` with int8 weights. As
onnxruntime registers its CUDA kernels, neither covers these types (uint8 activations into
int8 weights), and a node without a CUDA kernel runs on the CPU: on a GPU those nodes would
run there, with copies around each of them (not timed: the rewrite was what ran on the GPU).

:func:`without_integer_ops` computes the same thing with operators the CUDA provider has:
the quantization as ``ReduceMin``/``ReduceMax``, ``Round`` and ``Clip`` in float32, and each
integer product as a float ``MatMul`` of the centred quantized values (whole numbers up to 255
in magnitude) by the centred int8 weights. Whole numbers this small are exact in float32 and
in TF32, so each product equals the integer one up to float32 summation; the vectors agree
with the int8 graph's on the CPU (tests/training/test_import_encoder.py). The weights are
held as float32 (four times the int8 file, ~90 MB for MiniLM) on the GPU only.

Needs the ``onnx`` package (the ``gpu`` extra); the model's files and fingerprint stay as they
are: this is the same function, computed another way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

QUANTIZE, INTEGER_PRODUCT = "DynamicQuantizeLinear", "MatMulInteger"


def without_integer_ops(path: Path) -> bytes:
    """The graph at ``path``, serialized, with every ``DynamicQuantizeLinear`` feeding
    ``MatMulInteger`` computed in float32 (see the module). Raises ValueError for a graph of
    another shape (a quantized tensor read by anything but ``MatMulInteger``, non-constant
    weights)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)

    constants = {"qres_zero": 0.0, "qres_255": 255.0}
    added = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in constants.items()]
    centred: dict[str, str] = {}  # quantized tensor -> its float32 value minus the zero point
    retyped: set[str] = set()
    nodes = []
    for node in graph.node:
        if node.op_type == QUANTIZE:
            x, (q, scale, zero) = node.input[0], node.output
            for name in (q, zero):
                if any(r.op_type != INTEGER_PRODUCT for r in readers.get(name, [])):
                    raise ValueError(f"{name} is read by more than MatMulInteger")
            nodes += _quantize(helper, x, scale, q)
            centred[q] = q + "_centred"
            retyped.update((q, zero))
        elif node.op_type == INTEGER_PRODUCT:
            a, b, _, b_zero = (list(node.input) + ["", "", ""])[:4]
            if a not in centred or b not in weights or (b_zero and b_zero not in weights):
                raise ValueError(f"{node.name} is not a dynamically quantized product")
            w = numpy_helper.to_array(weights[b]).astype(np.float32)
            if b_zero:
                w = w - numpy_helper.to_array(weights[b_zero]).astype(np.float32)
            added.append(numpy_helper.from_array(w, b + "_float"))
            out = node.output[0]
            nodes.append(helper.make_node("MatMul", [centred[a], b + "_float"], [out], node.name))
            retyped.add(out)
        else:
            nodes.append(node)

    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept + added)
    # Shapes recorded for the int8/int32 tensors no longer hold their types.
    info = [v for v in graph.value_info if v.name not in retyped]
    del graph.value_info[:]
    graph.value_info.extend(info)
    return model.SerializeToString()


def _quantize(helper, x: str, scale: str, q: str) -> list:
    """Nodes computing DynamicQuantizeLinear's scale (named ``scale``, as before) and
    ``q + "_centred"``: the uint8 value minus the zero point, as float32."""

    def node(op: str, inputs: list[str], output: str, **attrs):
        return helper.make_node(op, inputs, [output], f"{output}_{op}", **attrs)

    low, high, zero, centred = q + "_low", q + "_high", q + "_zero", q + "_centred"
    return [
        # the range, widened to hold 0, over the whole tensor
        node("ReduceMin", [x], low + "_raw", keepdims=0),
        node("Min", [low + "_raw", "qres_zero"], low),
        node("ReduceMax", [x], high + "_raw", keepdims=0),
        node("Max", [high + "_raw", "qres_zero"], high),
        node("Sub", [high, low], q + "_range"),
        node("Div", [q + "_range", "qres_255"], scale),
        # zero point: round(clip(0 - low / scale, 0, 255))
        node("Div", [low, scale], low + "_steps"),
        node("Neg", [low + "_steps"], zero + "_raw"),
        node("Round", [zero + "_raw"], zero + "_rounded"),
        node("Clip", [zero + "_rounded", "qres_zero", "qres_255"], zero),
        # value: clip(round(x / scale) + zero point, 0, 255), then centred
        node("Div", [x, scale], q + "_steps"),
        node("Round", [q + "_steps"], q + "_rounded"),
        node("Add", [q + "_rounded", zero], q + "_shifted"),
        node("Clip", [q + "_shifted", "qres_zero", "qres_255"], q + "_float"),
        node("Sub", [q + "_float", zero], centred),
    ]
