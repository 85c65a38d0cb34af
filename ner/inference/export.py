"""`export_onnx`: a tagger's emission graph (encoder + combiner + pooling + word features + head)
as a self-contained ONNX folder that onnxruntime runs alone.

The folder (docs/export.md describes its contract for other languages):

    model.onnx       inputs `ner.json["inputs"]` -> `emissions [sentences, words, labels]` float32
    model.int8.onnx  the same graph, linear layers in int8 (optional; `quantize_int8`)
    tokenizer/       the tokenizer's files (`AutoTokenizer.from_pretrained` reads them)
    ner.json         labels, scheme, window settings, inputs and their axes, decoding constraints
                     (and CRF transitions): everything that turns word pieces into tags

Batch and length axes are dynamic; the graph is traced from a sample batch built by the same
alignment and collate as inference (`ner.inference.routine.map_batches`), so the inputs are the
inference routine's own.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ner.corpus.shapes import MAX_BYTES, SHAPES
from ner.inference.routine import Tagger, map_batches
from ner.utils.errors import NERError, first_line
from ner.utils.files import atomic_folder

FORMAT, VERSION = "ner-onnx", 1
OPSET = 18  # ScatterElements with min/max reduction (first/last-piece pooling) needs 18
INPUTS = ("input_ids", "attention_mask", "piece_word", "word_mask")
# axis names of each input; word features add theirs (`word_shape`, `word_chars`)
AXES = {
    "input_ids": ("windows", "pieces"),
    "attention_mask": ("windows", "pieces"),
    "piece_word": ("windows", "pieces"),
    "word_mask": ("sentences", "words"),
    "word_shape": ("sentences", "words"),
    "word_chars": ("sentences", "words", "bytes"),
}
# lengths that differ from each other, so the trace cannot mistake one axis for another
SAMPLE = [
    ["Export", "sample", "sentence", "one", "for", "ONNX", "."],
    ["Peter", "Blackburn", "visits", "Brussels"],
    ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", ".", "Now"],
]


class EmissionGraph(nn.Module):
    """A tagger's forward with its batch dict spelled out as positional tensors (ONNX has no
    dicts): `forward(*inputs) -> emissions [sentences, words, labels]` in float32."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *tensors: Tensor) -> Tensor:
        return self.model(dict(zip(self.names, tensors, strict=True))).float()


def input_names(model: Tagger) -> tuple[str, ...]:
    """The graph's inputs: the batch tensors the forward pass reads."""
    return INPUTS + tuple(model.word_inputs)


def sample_batch(model: Tagger) -> dict[str, Tensor]:
    """A batch of `SAMPLE` made by the inference routine itself (fp32, on the CPU)."""
    batches: list[dict[str, Tensor]] = []

    def keep(batch: dict[str, Tensor]) -> list[None]:
        batches.append(batch)
        return [None] * len(batch["sent_id"])

    for _ in map_batches(model, keep, SAMPLE, bf16=False):
        pass
    return {k: v.clone() for k, v in batches[0].items()}  # clones: not inference tensors


def trace(model: Tagger, path: Path) -> None:
    """Export `model`'s emission graph to `path` (ONNX, dynamic batch and length axes)."""
    names = input_names(model)
    batch = sample_batch(model)
    # windows are never longer than the recorded window length (the encoder's positions bound it)
    dims: dict[str, Any] = {
        "pieces": torch.export.Dim("pieces", max=model.window_settings.max_length)
    }
    shapes = tuple(
        {i: dims.setdefault(a, torch.export.Dim(a)) for i, a in enumerate(AXES[n])} for n in names
    )
    graph = EmissionGraph(model, names).eval()
    # the exporter prints its progress on stdout; a failure is reported below in one line
    with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
        try:
            program = torch.onnx.export(
                graph,
                tuple(batch[n] for n in names),
                input_names=list(names),
                output_names=["emissions"],
                dynamic_shapes=(shapes,),  # one entry: the varargs of `forward`
                opset_version=OPSET,
                dynamo=True,
                verbose=False,
            )
        except Exception as exc:  # the exporter's errors are many and deep: name the part
            raise NERError(f"cannot export this model to ONNX: {first_line(exc)}") from None
    program.save(str(path))


def decoding(model: Tagger) -> dict[str, Any]:
    """How emissions become tags: the IOB2 constraints, the weight of document-level
    consistency and, for a CRF head, its transitions."""
    head = model.head
    out: dict[str, Any] = {
        "kind": "crf" if head.crf_layer is not None else "softmax",
        "start_allowed": head.start_allowed.tolist(),
        "transition_allowed": head.trans_allowed.tolist(),  # [from][to]
        "consistency": float(getattr(model, "consistency", 0.0)),  # document-level weight
    }
    if head.crf_layer is not None:
        crf = head.crf_layer
        out["transitions"] = crf.transitions.detach().float().tolist()  # [from][to]
        out["start_transitions"] = crf.start_transitions.detach().float().tolist()
        out["end_transitions"] = crf.end_transitions.detach().float().tolist()
    return out


def manifest(
    model: Tagger, quantized: bool, source: str | None, key: str | None = None
) -> dict[str, Any]:
    """The contents of `ner.json` (`key`: what the weights hash to, for caches)."""
    names = input_names(model)
    return {
        "format": FORMAT,
        "version": VERSION,
        "source": source,
        "key": key,
        "labels": list(model.labels),
        "scheme": "IOB2",
        "window_settings": model.window_settings.as_dict(),
        "inputs": {n: list(AXES[n]) for n in names},
        "word_inputs": list(model.word_inputs),
        "word_shapes": list(SHAPES),
        "word_bytes": MAX_BYTES,
        "models": {"float32": "model.onnx", **({"int8": "model.int8.onnx"} if quantized else {})},
        "decoding": decoding(model),
    }


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


def export_onnx(
    model: Tagger,
    output: str | Path,
    int8: bool = True,
    source: str | None = None,
    key: str | None = None,
) -> Path:
    """Write `model`'s ONNX folder to `output` (absent or empty); it appears whole or not at all.

    `int8`: also write the int8 graph (`quantize_int8`). `source`: recorded in `ner.json` (the
    checkpoint it came from)."""
    if not isinstance(model, nn.Module):
        raise NERError(f"cannot export {type(model).__name__}: not a torch module")
    device = next(model.parameters()).device
    model.cpu().eval()
    try:
        with atomic_folder(output) as stage:
            trace(model, stage / "model.onnx")
            if int8:
                quantize_int8(stage / "model.onnx", stage / "model.int8.onnx")
            model.tokenizer.save_pretrained(str(stage / "tokenizer"))
            text = json.dumps(manifest(model, int8, source, key), indent=1)
            (stage / "ner.json").write_text(text + "\n", encoding="utf-8")
    finally:
        model.to(device)
    return Path(output)
