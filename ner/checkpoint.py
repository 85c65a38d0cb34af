"""Self-contained, safe checkpoints.

A checkpoint carries everything needed to rebuild the tagger without the network or the original
model directory: the encoder config, the tokenizer files, the label set and scheme, the window
settings the model was trained with, and the `class_path`/`init_args` of the combiner, pooling
and head. Loading never unpickles objects (`weights_only=True`) and never imports a class the
checkpoint names unless it is part of `ner` or the caller passes it in `extra_classes`.
Format 1 (before window settings were recorded) still loads: its windows are the defaults.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from ner.alignment import WindowSettings
from ner.errors import NERError

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MODULE_ARGS = ("combiner", "pooling", "head", "word_features")  # word_features may be None
# Plain hyperparameters copied from the tagger; anything else in a checkpoint is ignored.
SCALAR_ARGS = (
    "freeze_encoder",
    "cache_features",
    "encoder_lr",
    "head_lr",
    "weight_decay",
    "warmup_ratio",
    "scheme",
    "metric_mode",
)


def module_spec(module: nn.Module | None) -> dict[str, Any] | None:
    """`{"class_path", "init_args"}` of a pluggable module, read from same-named attributes."""
    if module is None:
        return None
    cls = type(module)
    init_args = {}
    for name in list(inspect.signature(cls.__init__).parameters)[1:]:
        if name in ("args", "kwargs"):
            continue
        if not hasattr(module, name):
            raise NERError(
                f"{cls.__qualname__} does not store its init argument {name!r} as self.{name}; "
                "a checkpoint cannot record it"
            )
        value = getattr(module, name)
        init_args[name] = list(value) if isinstance(value, tuple) else value
    return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": init_args}


def build_module(
    spec: dict[str, Any] | None, field: str, extra_classes: Sequence[type] = ()
) -> nn.Module | None:
    """Rebuild a module from its spec, importing only classes of `ner` or `extra_classes`."""
    if spec is None:
        return None
    class_path = str(spec.get("class_path", ""))
    allowed = {f"{c.__module__}.{c.__qualname__}": c for c in extra_classes}
    if class_path in allowed:
        cls = allowed[class_path]
    elif class_path.startswith("ner.") and class_path.count(".") == 2:
        module_name, _, name = class_path.rpartition(".")
        cls = getattr(importlib.import_module(module_name), name, None)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise NERError(f"checkpoint {field}: {class_path!r} is not a module class of ner")
    else:
        raise NERError(
            f"checkpoint {field}: class {class_path!r} is not part of ner; if you trust it, "
            "pass it in extra_classes"
        )
    init_args = spec.get("init_args") or {}
    if not isinstance(init_args, dict):
        raise NERError(f"checkpoint {field}: init_args is not a mapping")
    return cls(**init_args)


class Packable(Protocol):
    """What `pack` reads from a tagger."""

    hparams: Any
    tokenizer: Any
    encoder: nn.Module
    labels: list[str]
    window_settings: WindowSettings
    train_entities: list[str] | None


def pack(tagger: Packable) -> dict[str, Any]:
    """The `ner` section of a checkpoint: all that `load_tagger` needs besides the weights."""
    with tempfile.TemporaryDirectory() as tmp:
        tagger.tokenizer.save_pretrained(tmp)
        tokenizer_files = {p.name: p.read_text(encoding="utf-8") for p in Path(tmp).iterdir()}
    return {
        "format_version": FORMAT_VERSION,
        "encoder_name": str(tagger.hparams.get("encoder", "")),
        "encoder_config": tagger.encoder.config.to_json_string(),
        "tokenizer_files": tokenizer_files,
        "labels": list(tagger.labels),
        "windows": tagger.window_settings.as_dict(),
        "train_entities": tagger.train_entities,
        "modules": {name: module_spec(getattr(tagger, name)) for name in MODULE_ARGS},
        "hparams": {name: getattr(tagger, name) for name in SCALAR_ARGS},
    }


def read_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """`torch.load(weights_only=True)` with every failure turned into a one-line `NERError`."""
    path = Path(path)
    if not path.is_file():
        raise NERError("no such checkpoint file", path=str(path))
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        raise NERError(f"not a readable checkpoint ({first_line(exc)})", path=str(path)) from None
    except Exception as exc:  # noqa: BLE001  (UnpicklingError and its relatives: unsafe content)
        raise NERError(
            f"refused to load: it holds objects other than weights ({first_line(exc)})",
            path=str(path),
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise NERError("not a Lightning checkpoint (no state_dict)", path=str(path))
    section = checkpoint.get("ner")
    if not isinstance(section, dict) or section.get("format_version") not in READABLE_VERSIONS:
        raise NERError("not an ner checkpoint (missing or unknown 'ner' section)", path=str(path))
    return checkpoint


def materialize(section: dict[str, Any]) -> str:
    """Write the stored encoder config and tokenizer files to a private temporary directory."""
    directory = Path(tempfile.mkdtemp(prefix="ner-ckpt-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    for name, text in section["tokenizer_files"].items():
        if Path(name).name != name:  # a stored name must not escape the directory
            raise NERError(f"checkpoint tokenizer file name {name!r} is not a plain file name")
        (directory / name).write_text(text, encoding="utf-8")
    (directory / "config.json").write_text(section["encoder_config"], encoding="utf-8")
    return str(directory)


def tagger_kwargs(section: dict[str, Any], extra_classes: Sequence[type] = ()) -> dict[str, Any]:
    """Init arguments that rebuild the stored tagger (encoder from config only, no weights)."""
    kwargs = {k: v for k, v in section["hparams"].items() if k in SCALAR_ARGS}
    kwargs.update(
        encoder=materialize(section),
        labels=list(section["labels"]),
        pretrained=False,
        **{
            # a checkpoint older than word features has none
            name: build_module(section["modules"].get(name), name, extra_classes)
            for name in MODULE_ARGS
        },
    )
    return kwargs


def window_settings(section: dict[str, Any]) -> WindowSettings | None:
    """The recorded window settings (None in a format-1 checkpoint: the defaults apply)."""
    windows = section.get("windows")
    if windows is None:
        return None
    if not isinstance(windows, dict) or set(windows) != {"max_length", "stride", "context_pieces"}:
        raise NERError("checkpoint windows: not max_length, stride and context_pieces")
    return WindowSettings(**windows)


def weights_error(exc: RuntimeError, path: str | Path) -> NERError:
    """`load_state_dict`'s complaint as a one-line error naming the checkpoint."""
    return NERError(f"weights do not fit the stored model ({first_line(exc)})", path=str(path))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
