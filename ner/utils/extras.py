"""Optional parts and the packages they need: a command whose extra is missing says in one
line which `pip install` brings it, before it starts any work."""

from __future__ import annotations

from importlib.util import find_spec

from ner.utils.errors import NERError

# extra (pyproject.toml's optional-dependencies) -> the modules it provides
EXTRAS = {
    "analysis": ("matplotlib", "sklearn", "scipy", "PIL"),  # ner probe / project, projections
    "export": ("onnx", "onnxscript", "onnxruntime", "torchao"),  # ner export, onnx, int8
    "serve": ("litserve", "fastapi", "uvicorn"),  # ner serve
    "tensorboard": ("tensorboard",),  # configs/logger/tensorboard.yaml
}


def missing(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here."""
    return [name for name in EXTRAS[extra] if find_spec(name) is None]


def require(extra: str, what: str) -> None:
    """A one-line `NERError` naming the install command when `extra` is not installed."""
    absent = missing(extra)
    if absent:
        raise NERError(
            f"{what} needs {', '.join(absent)}, which the [{extra}] extra installs: "
            f"pip install -e '.[{extra}]' (from the repository; scripts/setup.sh installs all)"
        )
