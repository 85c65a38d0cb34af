"""Inference backends: the same emissions from a faster engine, behind the one inference routine.

- `torch` (default) with `quantize="int8"`: torchao's dynamic int8 quantization of the encoder's
  linear layers (int8 weights, activations quantized per token at run time).
- `onnx`: the model's exported graph (`ner.inference.export`) run by onnxruntime with all graph
  optimizations; `quantize="int8"`: its int8 copy (int8 weights, activations quantized per row
  at run time, `ner.inference.int8.quantize_int8`).

Both int8 paths give each token's activations a scale of their own, never one over the batch, so
quantizing ties no sentence to its batch mates: onnx int8 gives a sentence the same emissions, bit
for bit, in any batch. torchao runs torch's attention, whose last bits move with the batch's
padded length, and one int8 step can carry such a move further (tests/test_backends.py,
benchmarks/invariance.py).

`accelerate(model, backend, quantize)` attaches one to a tagger (`model.runtime`), so
`tagger.predict`, `ner tag` and `ner predict` keep their alignment, batching and decoding and
only the forward pass changes. An ONNX export is cached by the model's weights and settings.
`ExportedTagger` tags from an export folder alone, without the checkpoint.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ner.data.feature_cache import encoder_fingerprint
from ner.data.pretrained import load_tokenizer
from ner.data.windows import WindowSettings
from ner.inference.backend_table import check_backend
from ner.inference.export import FORMAT, VERSION, export_onnx
from ner.inference.int8 import INT8_SCHEME
from ner.inference.routine import predict_entities
from ner.modules.heads import LinearHead
from ner.utils.errors import NERError
from ner.utils.extras import require
from ner.utils.noise import silence_imports


class OnnxEmissions:
    """`batch -> emissions [sentences, words, labels]` by an onnxruntime session on the CPU."""

    def __init__(self, path: str | Path, threads: int | None = None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.log_severity_level = 3  # its warnings are about node placement, not results
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, batch: dict[str, Tensor]) -> Tensor:
        feed = {n: batch[n].cpu().numpy() for n in self.inputs}
        return torch.from_numpy(self.session.run(None, feed)[0])


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """`ner.json` of an export folder, checked."""
    path = Path(folder) / "ner.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise NERError(f"not an ONNX export ({type(exc).__name__})", path=str(path)) from None
    if data.get("format") != FORMAT or data.get("version", 0) > VERSION:
        raise NERError(f"not a {FORMAT} folder of version <= {VERSION}", path=str(path))
    return data


def is_export(path: str | Path) -> bool:
    """Whether `path` is an export folder (as opposed to a checkpoint file)."""
    return Path(path).is_dir() and (Path(path) / "ner.json").is_file()


def decoder(labels: list[str], decoding: dict[str, Any]) -> LinearHead:
    """A head that decodes as the exported one: IOB2-constrained, with its CRF transitions."""
    head = LinearHead(dropout=0.0, crf=decoding["kind"] == "crf")
    head.bind(1, labels)  # the classifier is unused: emissions come from the graph
    if head.crf_layer is not None:
        crf = head.crf_layer
        for name in ("transitions", "start_transitions", "end_transitions"):
            getattr(crf, name).data = torch.tensor(decoding[name], dtype=torch.float)
    return head.eval()


class ExportedTagger:
    """A tagger from an export folder (`ner export`): the `ner.inference.routine.Tagger` the
    inference routine needs, its forward pass by onnxruntime. `quantize="int8"` runs the int8
    graph."""

    def __init__(self, folder: str | Path, quantize: str | None = None):
        require("export", "tagging with an export folder")
        data = read_manifest(folder)
        model = {None: "float32", "int8": "int8"}[quantize]
        if model not in data["models"]:
            raise NERError(f"this export has no {model} model", path=str(folder))
        self.folder = Path(folder)
        self.labels: list[str] = data["labels"]
        self.window_settings = WindowSettings(**data["window_settings"])
        self.word_inputs = tuple(data["word_inputs"])
        self.tokenizer = load_tokenizer(str(self.folder / "tokenizer"))
        self.head = decoder(self.labels, data["decoding"])
        self.consistency = float(data["decoding"].get("consistency", 0.0))  # older: none
        self.runtime = OnnxEmissions(self.folder / data["models"][model])

    def __call__(self, batch: dict[str, Tensor]) -> Tensor:
        return self.runtime(batch)

    def parameters(self) -> Iterator[Tensor]:
        yield torch.zeros(())  # the device inference batches go to: the CPU

    def eval(self) -> ExportedTagger:
        return self

    def predict(self, texts: Sequence[str | Sequence[str]], **kwargs: Any) -> list[list[dict]]:
        """Entities per input, as `NERTagger.predict` gives them (`ner.inference.routine`)."""
        return predict_entities(self, texts, **kwargs)


def export_key(model: Any) -> str:
    """What an export of `model` depends on: its weights, labels, settings, the format and how
    its int8 graph is quantized."""
    digest = hashlib.sha256(f"{FORMAT}|{VERSION}|{INT8_SCHEME}|{torch.__version__}|".encode())
    digest.update(encoder_fingerprint(model).encode())
    digest.update(json.dumps([model.labels, model.window_settings.as_dict()]).encode())
    return digest.hexdigest()[:32]


def export_folder(model: Any) -> Path | None:
    """Where the export of a tagger loaded from a checkpoint is kept: beside it, named after it
    (`checkpoints/NAME/best.ckpt` -> `checkpoints/NAME/best.onnx/`); None for a model from no
    file."""
    path = getattr(model, "checkpoint_path", None)
    return None if path is None else Path(path).with_suffix(".onnx")


def _scratch_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="ner-onnx-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder / "export"


def _current(folder: Path, key: str) -> bool:
    return is_export(folder) and read_manifest(folder).get("key") == key


def cached_export(model: Any, folder: str | Path | None = None) -> Path:
    """`model`'s export in `folder` (default: `export_folder`, else a temporary one), made once
    and made again when the export there holds other weights (a newer checkpoint). A folder
    that cannot be written falls back to a temporary one."""
    key = export_key(model)
    target = Path(folder) if folder else export_folder(model) or _scratch_folder()
    if _current(target, key):
        return target
    try:
        if is_export(target):  # an export of other weights: ours to replace
            shutil.rmtree(target)
        export_onnx(model, target, int8=True, key=key)
    except (OSError, NERError):
        if _current(target, key):  # another process exported it first
            return target
        if folder is not None:
            raise
        target = _scratch_folder()  # e.g. a read-only checkpoint folder
        export_onnx(model, target, int8=True, key=key)
    return target


def quantize_torch_int8(model: Any) -> None:
    """torchao's int8 dynamic quantization of the encoder's linear layers, in place: int8
    weights per output channel, activations per token (`PerRow`, named although it is the
    default: one scale over the batch would tie a sentence's values to its batch mates)."""
    silence_imports()  # torchao's import noise (ner.utils.noise), should this be its first import
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, PerRow, quantize_

    quantize_(model.encoder, Int8DynamicActivationInt8WeightConfig(granularity=PerRow()))


def accelerate(
    model: Any,
    backend: str = "torch",
    quantize: str | None = None,
    folder: str | Path | None = None,
) -> Any:
    """Attach `backend` (`torch`, `onnx`) with `quantize` (None, `int8`) to a tagger, for
    inference; returns it. Irreversible for `torch` + `int8` (the encoder is quantized).
    `folder`: where the ONNX export is kept (default: beside the checkpoint, `cached_export`)."""
    check_backend(backend, quantize)  # the one table of backends
    if backend == "onnx" or quantize:
        require("export", f"--backend {backend}" + (f" --quantize {quantize}" if quantize else ""))
    if backend == "onnx":
        if next(model.parameters()).device.type != "cpu":
            raise NERError("backend onnx runs on the CPU; use --device cpu")
        exported = cached_export(model, folder)
        name = read_manifest(exported)["models"]["int8" if quantize else "float32"]
        model.runtime = OnnxEmissions(exported / name)
    elif quantize == "int8":
        model.runtime = None
        quantize_torch_int8(model)
    return model
