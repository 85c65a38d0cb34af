"""`export_onnx`: a tagger's emission graph (encoder + combiner + pooling + word features + head)
as a self-contained ONNX folder that onnxruntime runs alone.

The folder (docs/export.md describes its contract for other languages):

    model.onnx       inputs `ner.json["inputs"]` -> `emissions [sentences, words, labels]` float32
    model.int8.onnx  the same graph, linear layers in int8 (optional; `quantize_int8`)
    tokenizer/       the tokenizer's files (`AutoTokenizer.from_pretrained` reads them)
    ner.json         labels, scheme, window settings, inputs and their axes, decoding constraints
                     (and CRF transitions): everything that turns word pieces into tags
    README.md        the checkpoint's model card, where it has one (`ner fit` writes it)

Batch and length axes are dynamic; the graph is traced from a sample batch built by the same
alignment and collate as inference (`ner.inference.routine.map_batches`), so the inputs are the
inference routine's own.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ner.corpus.shapes import MAX_BYTES, SHAPES
from ner.inference.int8 import quantize_int8
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

    for _ in map_batches(model, keep, SAMPLE, bf16=False, packed=False):  # the graph's inputs
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


def export_onnx(
    model: Tagger,
    output: str | Path,
    int8: bool = True,
    source: str | None = None,
    key: str | None = None,
    card: Path | None = None,
) -> Path:
    """Write `model`'s ONNX folder to `output` (absent or empty); it appears whole or not at all.

    `int8`: also write the int8 graph (`quantize_int8`). `source`: recorded in `ner.json` (the
    checkpoint it came from). `card`: the checkpoint's model card, copied in under its name."""
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
            if card is not None:
                _copy_card(card, stage / card.name)
    finally:
        model.to(device)
    return Path(output)


def _copy_card(card: Path, target: Path) -> None:
    try:
        shutil.copyfile(card, target)
    except OSError as exc:  # a card gone or unreadable since it was found
        raise NERError(f"cannot copy the model card ({exc.strerror or exc})", str(card)) from None
