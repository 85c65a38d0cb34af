"""THE model loader of `ner tag`, `ner serve` (each of its workers) and Python: a checkpoint on
its device and backend, an ensemble of checkpoints, or an `ner export` folder."""

from __future__ import annotations

from collections.abc import Sequence

from ner.inference.backends import ExportedTagger, is_export
from ner.inference.ensemble import Ensemble
from ner.inference.routine import Tagger
from ner.model.tagger import load_tagger
from ner.utils.errors import NERError
from ner.utils.precision import resolve_device


def load_model(
    checkpoint: str,
    backend: str = "torch",
    quantize: str | None = None,
    device: str = "auto",
    ensemble: Sequence[str] = (),
) -> Tagger:
    """The model to tag with. A module-level function, so `functools.partial(load_model, ...)`
    pickles into LitServe's worker processes.

    Args:
        checkpoint: a checkpoint file, or a folder written by `ner export`.
        backend: torch, or onnx (ONNX Runtime on the CPU; exported once, then cached).
        quantize: None, or int8.
        device: auto (a GPU if there is one), cpu, cuda:N.
        ensemble: more checkpoints of the same recipe, averaged with the first (torch only).
    """
    if ensemble and (is_export(checkpoint) or backend != "torch" or quantize):
        raise NERError("an ensemble of checkpoints runs on the torch backend", path="--ensemble")
    if is_export(checkpoint):
        return ExportedTagger(checkpoint, quantize)
    onnx_auto = backend == "onnx" and device == "auto"  # onnx runs on the CPU
    where = resolve_device("cpu" if onnx_auto else device)
    if ensemble:
        paths = [checkpoint, *ensemble]
        return Ensemble([load_tagger(p) for p in paths], paths).to(where)
    return load_tagger(checkpoint).to(where).accelerate(backend, quantize)
