"""THE class loader: a `module.Class` path -> the class, for checkpoints (only classes of `ner`
and those the caller trusts) and for command-line options (`ner probe --head`). Paths of the
flat layout (`ner.combiners.ScalarMix`) resolve to where the class lives now."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from ner.utils.errors import NERError
from ner.utils.moved import current


def class_path(cls: type) -> str:
    """`module.Class` of a class."""
    return f"{cls.__module__}.{cls.__qualname__}"


def load_class(
    path: str, base: type, field: str, trusted: Sequence[type] = (), only_ner: bool = False
) -> type:
    """The subclass of `base` that `path` names; a one-line `NERError` naming `field` if it is
    not one. `only_ner`: refuse (without importing anything) a class outside `ner` that is
    not in `trusted`, as a checkpoint from a stranger must."""
    path = current(str(path))
    allowed = {class_path(c): c for c in trusted}
    if path in allowed:
        return allowed[path]
    if only_ner and not path.startswith("ner."):
        raise NERError(
            f"class {path!r} is not part of ner; if you trust it, pass it in extra_classes",
            path=field,
        )
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name, None) if module else None
    except ImportError as exc:
        raise NERError(f"cannot import {module!r} ({exc})", path=field) from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise NERError(f"{path!r} is not a {base.__name__} class (module.Class)", path=field)
    return cls
