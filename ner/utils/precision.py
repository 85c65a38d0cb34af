"""Choosing the numeric precision: bf16 autocast only where the hardware runs it fast."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from ner.utils.errors import NERError

# CPU flags with native bf16 matrix instructions. Without them PyTorch falls back to a reference
# bf16 GEMM, far slower than fp32.
FAST_BF16_FLAGS = {"amx_bf16", "avx512_bf16"}
CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU feature flags (from /proc/cpuinfo, or the text given)."""
    if cpuinfo is None:
        cpuinfo = CPUINFO.read_text(errors="replace") if CPUINFO.exists() else ""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def cpu_has_fast_bf16(cpuinfo: str | None = None) -> bool:
    """True if the CPU has AMX or AVX-512 bf16 instructions."""
    return bool(cpu_flags(cpuinfo) & FAST_BF16_FLAGS)


def auto_precision(accelerator: str = "auto") -> str:
    """Lightning precision for `accelerator`: `bf16-mixed` on bf16-capable CUDA GPUs and CPUs
    with native bf16 matrix instructions, else `32-true` (fp32 master weights either way)."""
    wants_gpu = accelerator in ("gpu", "cuda") or (
        accelerator == "auto" and torch.cuda.is_available()
    )
    if wants_gpu:
        return (
            "bf16-mixed"
            if torch.cuda.is_available() and torch.cuda.is_bf16_supported()
            else "32-true"
        )
    return "bf16-mixed" if cpu_has_fast_bf16() else "32-true"


def bf16_inference(device: torch.device | str, enabled: bool | None = None) -> bool:
    """Whether inference on `device` runs in bf16 autocast: `enabled`, or (None) where fast."""
    if enabled is not None:
        return enabled
    device_type = torch.device(device).type
    return auto_precision("gpu" if device_type == "cuda" else "cpu") == "bf16-mixed"


def autocast(device: torch.device | str, enabled: bool | None = None):
    """`torch.autocast` in bf16 for inference on `device`; `enabled=None` decides automatically."""
    enabled = bf16_inference(device, enabled)
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=enabled)


_held = threading.Lock()
_holders: dict[int, tuple[int, list]] = {}  # id(model) -> (entrants, the fp32 tensors held)


@contextmanager
def linears_in_bf16(model: nn.Module) -> Iterator[None]:
    """Hold `model`'s `nn.Linear` weights and biases in bf16 while inside, for inference under
    bf16 autocast. Autocast casts them to exactly these values at every call anyway (so results
    are bit for bit the same), but under `torch.inference_mode` it does not cache the cast, so
    each batch re-reads and rounds every weight. Re-entrant and thread-safe: the first entrant
    casts, the last one out puts the fp32 tensors (the same storage) back."""
    key = id(model)
    with _held:
        entrants, saved = _holders.get(key, (0, []))
        if entrants == 0:
            saved = [
                (module, name, tensor.data)
                for module in model.modules()
                if isinstance(module, nn.Linear)
                for name, tensor in module.named_parameters(recurse=False)
                if tensor.dtype == torch.float32 and type(tensor.data) is torch.Tensor
            ]
            for module, name, data in saved:
                getattr(module, name).data = data.to(torch.bfloat16)
        _holders[key] = (entrants + 1, saved)
    try:
        yield
    finally:
        with _held:
            entrants, saved = _holders.pop(key)
            if entrants > 1:
                _holders[key] = (entrants - 1, saved)
            else:
                for module, name, data in saved:
                    getattr(module, name).data = data


def resolve_device(name: str = "auto") -> torch.device:
    """`auto`: a CUDA GPU where there is one, else the CPU; else the device named (`cpu`,
    `cuda`, `cuda:N`), a one-line error for a name torch does not know or a GPU not there."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise NERError(
            f"unknown device {name!r} (auto, cpu, cuda, cuda:N)", path="--device"
        ) from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise NERError(f"no {name} here ({count} CUDA GPUs visible)", path="--device")
    return device
