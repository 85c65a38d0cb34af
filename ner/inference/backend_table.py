"""The inference backends and quantizations, one table: `ner tag`, `ner serve`, `ner export`
and the Python API (`NERTagger.accelerate`, `ner.inference.backends.accelerate`) read their
choices and help here, so a backend added to the table reaches every door at once."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ner.utils.errors import NERError


@dataclass(frozen=True)
class Backend:
    """One way to run a tagger's network at inference.

    Args:
        name: what `--backend` says.
        summary: one line for `--help`.
        devices: where it runs.
        exports: whether it runs an `ner export` folder (exported once, cached beside the
            checkpoint).
    """

    name: str
    summary: str
    devices: tuple[str, ...]
    exports: bool


@dataclass(frozen=True)
class Quantization:
    """A `--quantize` choice and what it does on each backend that offers it."""

    name: str
    by_backend: dict[str, str]


BACKENDS_TABLE: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("torch", "PyTorch, on the CPU (bf16 autocast where the CPU runs it natively) or a "
                "GPU", ("cpu", "cuda"), exports=False),
        Backend("onnx", "ONNX Runtime on the CPU, from the checkpoint's export (made once, then "
                "cached)", ("cpu",), exports=True),
    )
}  # fmt: skip
QUANTIZATIONS: dict[str, Quantization] = {
    "int8": Quantization("int8", {
        "torch": "torchao's dynamic int8 of the encoder's linear layers (activations per token)",
        "onnx": "the export's int8 graph (`model.int8.onnx`: int8 weights, activations per row)",
    }),
}  # fmt: skip
BACKENDS: tuple[str, ...] = tuple(BACKENDS_TABLE)
QUANTIZE: tuple[str | None, ...] = (None, *QUANTIZATIONS)


def backend_help() -> str:
    """`--backend`'s help: every backend with its line."""
    return "; ".join(f"{b.name}: {b.summary}" for b in BACKENDS_TABLE.values())


def quantize_help() -> str:
    """`--quantize`'s help: every quantization and what it does on each backend."""
    return "; ".join(
        f"{q.name}: " + ", ".join(f"{b}: {what}" for b, what in q.by_backend.items())
        for q in QUANTIZATIONS.values()
    )


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """`--backend` and `--quantize`, their choices and help from the table."""
    parser.add_argument("--backend", choices=BACKENDS, default="torch", help=backend_help())
    parser.add_argument("--quantize", choices=tuple(QUANTIZATIONS), default=None,
                        help=quantize_help())  # fmt: skip


def check_backend(backend: str, quantize: str | None) -> None:
    """A one-line error for a backend or quantization the table does not hold (or pair)."""
    if backend not in BACKENDS_TABLE:
        raise NERError(f"backend: {backend!r} is not one of {', '.join(BACKENDS)}")
    if quantize is not None and (
        quantize not in QUANTIZATIONS or backend not in QUANTIZATIONS[quantize].by_backend
    ):
        offered = [q for q, spec in QUANTIZATIONS.items() if backend in spec.by_backend]
        raise NERError(
            f"quantize: {quantize!r} is not one of {', '.join(offered) or 'none'} on {backend}"
        )
