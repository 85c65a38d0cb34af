"""`quantize_int8`: an exported ONNX graph (`ner.inference.export`) with its linear layers in
int8 and activations quantized row by row, so that quantizing ties no sentence to its batch
mates; the embedding tables as onnxruntime's `quantize_dynamic` makes them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


@contextlib.contextmanager
def _root_warnings_off() -> Iterator[None]:
    # onnxruntime's quantizer warns through the root logger (advice, and tensors it leaves in
    # float); a handler of ours keeps `logging.warning` from installing one on stderr for good
    root, handler = logging.getLogger(), logging.NullHandler()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


# What `quantize_int8` makes: part of the key of cached exports (`backends.export_key`), so an
# export of an earlier int8 scheme is made again
INT8_SCHEME = "int8 weights per output channel, activations per row"
LEVELS = 127  # symmetric int8 in [-127, 127]
TINY = np.finfo(np.float32).tiny
ZERO = np.uint8(128)  # activations go to the kernel as uint8 q + 128 (see `_row_quantizer`)


def quantize_int8(source: Path, target: Path) -> None:
    """Write `source`'s graph to `target` with its linear layers in int8 and activations
    quantized per row, so that quantizing ties no sentence to its batch mates.

    onnxruntime's `quantize_dynamic` gives a linear layer's input one scale over the whole batch
    tensor (`DynamicQuantizeLinear`): each sentence's values then follow its batch mates and
    their padding. Here each row (a piece's or a word's vector) has its own scale and the
    integer sums are exact, so a row's output is its own (`quantize_linears`). The embedding
    tables stay `quantize_dynamic`'s: int8 rows, dequantized after the lookup."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _root_warnings_off():
        quantize_dynamic(source, target, ["Gather"], per_channel=True, weight_type=QuantType.QInt8)
    model = onnx.load(str(target))
    quantize_linears(model.graph)
    onnx.checker.check_model(model)
    onnx.save(model, str(target))


def int8_columns(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A `[K, N]` weight in symmetric int8, one scale per output column: (int8, scales)."""
    scale = np.maximum(np.abs(weight).max(axis=0), TINY) / LEVELS
    quantized = np.clip(np.rint(weight / scale), -LEVELS, LEVELS).astype(np.int8)
    return quantized, scale.astype(np.float32)


def _row_quantizer(a: str, const: Any) -> tuple[list[Any], tuple[str, str]]:
    """Nodes that quantize `a` (`[..., K]` float) row by row: (nodes, (uint8 q + 128, scales)).

    s = max(|row|) / 127 (at least the smallest normal float: a row of zeros stays zero), q =
    round(row * (1 / s)), in [-127, 127] by construction. onnxruntime's CPU kernel for int8 x
    int8 is far slower than its uint8 x int8 one (which `quantize_dynamic`'s graphs use): q goes
    in as q + 128, zero point 128 (`QuantizeLinear` with scale 1: round half to even, add 128)."""
    from onnx.helper import make_node

    p = f"{a}/row_int8"
    last, levels = const("last", np.array([-1], np.int64)), const("levels", np.float32(LEVELS))
    tiny, one, zero = const("tiny", TINY), const("one", np.float32(1)), const("zero", ZERO)
    nodes = [
        make_node("Abs", [a], [f"{p}/abs"]),
        make_node("ReduceMax", [f"{p}/abs", last], [f"{p}/max"]),
        make_node("Div", [f"{p}/max", levels], [f"{p}/s"]),
        make_node("Max", [f"{p}/s", tiny], [f"{p}/scale"]),
        make_node("Reciprocal", [f"{p}/scale"], [f"{p}/inverse"]),
        make_node("Mul", [a, f"{p}/inverse"], [f"{p}/scaled"]),
        make_node("QuantizeLinear", [f"{p}/scaled", one, zero], [f"{p}/q"]),
    ]
    return nodes, (f"{p}/q", f"{p}/scale")


def quantize_linears(graph: Any) -> None:
    """Rewrite, in place, each MatMul of `graph` by a float32 weight matrix (an initializer) as
    y = float(MatMulInteger(q, W_int8)) * s * w_scale.

    The scales come in two `Mul`s after the `Cast`: onnxruntime fuses `Cast -> Mul(x, Mul(a_scale,
    b_scale))` into an op that takes a_scale per tensor, which a row's scale is not."""
    from onnx import TensorProto, numpy_helper
    from onnx.helper import make_node

    weights, added = {t.name: t for t in graph.initializer}, {}

    def const(name: str, value: np.ndarray) -> str:
        added.setdefault(name, numpy_helper.from_array(np.asarray(value), f"row_int8/{name}"))
        return f"row_int8/{name}"

    nodes, rows = [], {}
    for node in graph.node:
        w = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if w is None or len(w.dims) != 2 or w.data_type != TensorProto.FLOAT:
            nodes.append(node)
            continue
        a, y = node.input[0], node.output[0]
        if a not in rows:  # one quantization of an input that several layers read (Q, K, V)
            made, rows[a] = _row_quantizer(a, const)
            nodes += made
        quantized, columns = int8_columns(numpy_helper.to_array(w))
        int8, scales = const(f"{w.name}/int8", quantized), const(f"{w.name}/scale", columns)
        nodes += [
            make_node("MatMulInteger", [rows[a][0], int8, const("zero", ZERO)], [f"{y}/int32"]),
            make_node("Cast", [f"{y}/int32"], [f"{y}/float"], to=TensorProto.FLOAT),
            make_node("Mul", [f"{y}/float", rows[a][1]], [f"{y}/rows"]),
            make_node("Mul", [f"{y}/rows", scales], [y]),
        ]
    used = {i for n in nodes for i in n.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.node[:], graph.initializer[:]
    graph.node.extend(nodes)
    graph.initializer.extend(kept + list(added.values()))
