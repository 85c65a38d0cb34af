"""Automatic precision: bf16 only where the hardware has native bf16 matrix instructions."""

from __future__ import annotations

import pytest
import torch

from ner.utils import precision
from ner.utils.errors import NERError

AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ZEN4 = "flags : fpu avx2 avx512f avx512_bf16\n"


def test_cpu_flags_are_read_from_cpuinfo_text():
    assert precision.cpu_flags(AVX2_ONLY) == {"fpu", "sse2", "avx", "avx2", "fma"}
    assert precision.cpu_flags("no flags here") == set()


def test_fast_bf16_needs_amx_or_avx512_bf16():
    assert not precision.cpu_has_fast_bf16(AVX2_ONLY)
    assert precision.cpu_has_fast_bf16(AMX)
    assert precision.cpu_has_fast_bf16(ZEN4)


def test_auto_precision_on_cpu_follows_the_flags(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(precision, "CPUINFO", cpuinfo)
    cpuinfo.write_text(AMX)
    assert precision.auto_precision("cpu") == "bf16-mixed"
    cpuinfo.write_text(AVX2_ONLY)
    assert precision.auto_precision("cpu") == "32-true"
    cpuinfo.unlink()
    assert precision.auto_precision("cpu") == "32-true"


def test_auto_precision_on_gpu_needs_bf16_support(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert precision.auto_precision("gpu") == "bf16-mixed"
    assert precision.auto_precision("auto") == "bf16-mixed"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert precision.auto_precision("gpu") == "32-true"


def test_inference_autocast_is_off_without_fast_bf16(monkeypatch, tmp_path):
    monkeypatch.setattr(precision, "CPUINFO", tmp_path / "cpuinfo")
    (tmp_path / "cpuinfo").write_text(AVX2_ONLY)
    with precision.autocast("cpu"):
        assert not torch.is_autocast_enabled("cpu")
    with precision.autocast("cpu", enabled=True):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_a_device_that_is_not_there_is_a_one_line_error(monkeypatch):
    # regression: `ner tag --device cuda` on a machine without CUDA ended in torch's traceback
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("cuda", "cuda:1"):
        with pytest.raises(NERError, match=f"--device: no {name} here \\(0 CUDA GPUs visible\\)"):
            precision.resolve_device(name)
    with pytest.raises(NERError, match="unknown device 'tpu'"):
        precision.resolve_device("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert precision.resolve_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(NERError, match="no cuda:1 here \\(1 CUDA GPUs visible\\)"):
        precision.resolve_device("cuda:1")
    assert precision.resolve_device("cpu") == torch.device("cpu")
