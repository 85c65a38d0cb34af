"""Self-contained, safe checkpoints.

A checkpoint carries everything needed to rebuild the tagger without the network or the original
model directory: the encoder config, the tokenizer files, the label set and scheme, the window
settings the model was trained with, its word pooling, and the `class_path`/`init_args` of the
combiner, head and word features. Loading never unpickles objects (`weights_only=True`) and never
imports a class the checkpoint names unless it is part of `ner` or the caller passes it in
`extra_classes`. Older formats still load: format 1 has no window settings (the defaults apply),
formats 1 and 2 store the pooling as a module spec, and class paths of the flat layout
(`ner.combiners.ScalarMix`) resolve through `ner.utils.moved`.
"""

from __future__ import annotations

import atexit
import inspect
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from ner.data.windows import WindowSettings
from ner.modules.encoder import depth, layer_stack
from ner.utils.classes import class_path, load_class
from ner.utils.errors import NERError, first_line

FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
MODULE_ARGS = ("combiner", "head", "word_features")  # word_features may be None
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
    "consistency",
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
    return {"class_path": class_path(cls), "init_args": init_args}


def checked_spec(
    spec: Any, field: str, extra_classes: Sequence[type] = ()
) -> tuple[type, dict[str, Any]] | None:
    """The class (of `ner`, or one of `extra_classes`) and init arguments a stored spec names,
    checked without building anything."""
    if spec is None:
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get("init_args") or {}, dict):
        raise NERError(f"checkpoint {field}: not a class_path / init_args mapping")
    cls = load_class(spec.get("class_path", ""), nn.Module, f"checkpoint {field}",
                     extra_classes, only_ner=True)  # fmt: skip
    return cls, dict(spec.get("init_args") or {})


def module_specs(section: dict[str, Any], extra_classes: Sequence[type] = ()) -> dict[str, Any]:
    """The stored combiner, head and word features as checked specs with today's class paths
    (None where the checkpoint has none): what `tagger_kwargs` builds and what the CLI hands
    to LightningCLI, which builds them once."""
    specs = {}
    for name in MODULE_ARGS:
        checked = checked_spec(section["modules"].get(name), name, extra_classes)
        specs[name] = None if checked is None else {
            "class_path": class_path(checked[0]), "init_args": checked[1]}  # fmt: skip
    return specs


def build_module(
    spec: dict[str, Any] | None, field: str, extra_classes: Sequence[type] = ()
) -> nn.Module | None:
    """Rebuild a module from its spec, importing only classes of `ner` or `extra_classes`."""
    checked = checked_spec(spec, field, extra_classes)
    return None if checked is None else checked[0](**checked[1])


class Packable(Protocol):
    """What `pack` reads from a tagger."""

    encoder_name: str
    tokenizer: Any
    encoder: nn.Module
    pooling: Any  # `.mode`
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
        "encoder_name": tagger.encoder_name,
        "encoder_config": tagger.encoder.config.to_json_string(),
        "tokenizer_files": tokenizer_files,
        "labels": list(tagger.labels),
        "windows": tagger.window_settings.as_dict(),
        "train_entities": tagger.train_entities,
        "modules": {name: module_spec(getattr(tagger, name)) for name in MODULE_ARGS},
        "hparams": {
            "pooling": tagger.pooling.mode,
            **{name: getattr(tagger, name) for name in SCALAR_ARGS},
        },
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


def scalar_args(section: dict[str, Any]) -> dict[str, Any]:
    """The stored plain hyperparameters; before format 3 the pooling was a module spec."""
    kwargs = {k: v for k, v in section["hparams"].items() if k in (*SCALAR_ARGS, "pooling")}
    pooling = section["modules"].get("pooling")
    if isinstance(pooling, dict):  # `ner.pooling.WordPooling(mode)` of formats 1 and 2
        kwargs["pooling"] = (pooling.get("init_args") or {}).get("mode", "first")
    return kwargs


def tagger_kwargs(section: dict[str, Any], extra_classes: Sequence[type] = ()) -> dict[str, Any]:
    """Init arguments that rebuild the stored tagger (encoder from config only, no weights)."""
    specs = module_specs(section, extra_classes)
    return {
        **scalar_args(section),
        "encoder": materialize(section),
        "labels": list(section["labels"]),
        "pretrained": False,
        **{name: build_module(spec, name, extra_classes) for name, spec in specs.items()},
    }


def window_settings(section: dict[str, Any]) -> WindowSettings | None:
    """The recorded window settings (None in a format-1 checkpoint: the defaults apply)."""
    windows = section.get("windows")
    if windows is None:
        return None
    if not isinstance(windows, dict) or set(windows) != {"max_length", "stride", "context_pieces"}:
        raise NERError("checkpoint windows: not max_length, stride and context_pieces")
    return WindowSettings(**windows)


def check_fits(path: str | Path, model: nn.Module) -> None:
    """A one-line error when the checkpoint at `path` holds other weights than `model` has
    (a run resumed with other options than it was trained with); read memory-mapped."""
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    stored = {k: tuple(v.shape) for k, v in state.get("state_dict", {}).items()}
    wanted = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    unexpected, missing = sorted(set(stored) - set(wanted)), sorted(set(wanted) - set(stored))
    resized = sorted(k for k in set(stored) & set(wanted) if stored[k] != wanted[k])
    if unexpected or missing or resized:
        what = (f"{unexpected[0]!r} is not in this model" if unexpected else
                f"it has no {missing[0]!r}" if missing else
                f"{resized[0]!r} is {stored[resized[0]]}, not {wanted[resized[0]]}")  # fmt: skip
        raise NERError(
            f"holds another model than these options build ({what}); resume with the options "
            "it was trained with, or train afresh without --ckpt_path",
            path=str(path),
        )


def read_layers_only(state_dict: dict[str, Any], tagger: Any) -> dict[str, Any]:
    """The stored weights without those of encoder layers the tagger does not compute: a
    checkpoint written before unread layers were dropped (a combiner reading layer 4 of 6)
    holds them, and they never served."""
    stack = layer_stack(tagger.encoder)
    name = next(n for n, m in tagger.encoder.named_modules() if m is stack)
    prefix, kept = f"encoder.{name}.", depth(tagger.encoder)

    def computed(key: str) -> bool:
        index = key[len(prefix) :].split(".")[0]
        return not key.startswith(prefix) or not index.isdigit() or int(index) < kept

    return {k: v for k, v in state_dict.items() if computed(k)}


def weights_error(exc: RuntimeError, path: str | Path) -> NERError:
    """`load_state_dict`'s complaint as a one-line error naming the checkpoint."""
    return NERError(f"weights do not fit the stored model ({first_line(exc)})", path=str(path))
