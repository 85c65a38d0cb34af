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


def test_linears_held_in_bf16_give_autocast_results_bit_for_bit(tiny_model_dir):
    """Holding the linear weights in bf16 only saves autocast's per-call cast: the emissions
    under bf16 autocast are identical, and afterwards the model has its fp32 tensors back (the
    same storage: nothing an optimizer holds has moved)."""
    from helpers import tiny_tagger_batch

    model, batch = tiny_tagger_batch(tiny_model_dir)
    before = {name: p.data_ptr() for name, p in model.named_parameters()}
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(batch)
        with precision.linears_in_bf16(model):
            held = {p.dtype for m in model.modules() if isinstance(m, torch.nn.Linear)
                    for p in m.parameters()}  # fmt: skip
            with precision.linears_in_bf16(model):  # re-entrant: the inner exit restores nothing
                pass
            assert model.encoder.encoder.layer[0].output.dense.weight.dtype == torch.bfloat16
            got = model(batch)
    assert held == {torch.bfloat16}
    assert torch.equal(got, expected)
    assert all(p.data_ptr() == before[name] for name, p in model.named_parameters())
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_linears_are_restored_when_inference_fails(tiny_model_dir):
    from helpers import tiny_tagger_batch

    model, _ = tiny_tagger_batch(tiny_model_dir)
    with pytest.raises(RuntimeError, match="boom"), precision.linears_in_bf16(model):
        raise RuntimeError("boom")
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_cpu_piece_budget_is_larger_in_bf16():
    from ner.data.batching import CPU_BF16_PIECES, CPU_PIECES, piece_budget

    assert piece_budget("cpu") == CPU_PIECES and piece_budget("cpu", bf16=True) == CPU_BF16_PIECES
    assert piece_budget("cuda", bf16=True) == piece_budget("cuda") > CPU_BF16_PIECES
