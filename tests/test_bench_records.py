"""The benchmarks' records (`benchmarks.common.save_record`) and the speed tables rendered from
them (`ner.evaluation.bench_records`): planted CPU descriptions and records, tables written out
by hand. No benchmark runs here."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess

import torch
from helpers import run_ner

from benchmarks import common
from ner.evaluation import bench_records

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse4_2 avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu
"""
LSCPU = "Architecture:  aarch64\nModel name:    Neoverse-V2\nFlags:         fp asimd sve2\n"


def test_the_machine_is_the_cpus_model_cores_threads_and_flags_of_interest():
    found = common.machine(XEON)
    assert found["cpu"] == "Intel(R) Xeon(R) Platinum 8480+"
    # of the first processor, in FLAGS' order; fpu, sse4_2 and amx_int8 are of no interest
    assert found["flags"] == ["amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx512_vnni",
                              "avx2"]  # fmt: skip
    assert found["cores"] == os.cpu_count()
    assert found["torch_threads"] == torch.get_num_threads()


def test_a_cpuinfo_without_a_model_name_asks_lscpu(monkeypatch):
    def lscpu(command, **kwargs):
        assert command == ["lscpu"]
        return subprocess.CompletedProcess(command, 0, stdout=LSCPU)

    monkeypatch.setattr(common.subprocess, "run", lscpu)
    found = common.machine("processor\t: 0\nBogoMIPS\t: 2000.00\n")
    assert (found["cpu"], found["flags"]) == ("Neoverse-V2", [])


def bench_args(tmp_path, **given) -> argparse.Namespace:
    """What `common.parse` gives a benchmark run as `ner bench predict --ckpt 'a b.ckpt'`."""
    args = {"bench": "predict", "argv": ["--ckpt", "a b.ckpt"], "smoke": False, "record": None,
            "records": tmp_path / "records", "json": None, "variant": None}  # fmt: skip
    return argparse.Namespace(**(args | given))


def test_a_record_holds_its_command_machine_versions_and_figures(tmp_path):
    top = common.headline("tagging", "sentences/s", ("ours", 6.0), ("HF", 2.0))
    figures = {"rows": [{"side": "ours", "sentences/s": 6.0}], "headline": top}
    record = common.save_record(bench_args(tmp_path), figures, "documents")
    saved = json.loads((tmp_path / "records" / "predict-documents.json").read_text())
    assert saved == record
    assert saved["command"] == "ner bench predict --ckpt 'a b.ckpt'"  # quoted as a shell reads it
    assert saved["machine"] == {**common.machine(), "load_1min": saved["machine"]["load_1min"]}
    assert saved["versions"]["python"] == platform.python_version()
    assert saved["versions"]["torch"] == torch.__version__
    assert {"transformers", "ner"} <= set(saved["versions"])
    assert saved["rows"] == figures["rows"]
    assert saved["headline"] == {"figure": "tagging", "unit": "sentences/s", "ours_side": "ours",
                                 "ours": 6.0, "anchor_side": "HF", "anchor": 2.0,
                                 "ratio": 3.0}  # fmt: skip


def test_where_a_record_goes(tmp_path):
    records = tmp_path / "records"
    common.save_record(bench_args(tmp_path, smoke=True), {})  # smoke figures are no record
    assert not records.exists()
    common.save_record(bench_args(tmp_path, smoke=True, record=True), {})
    common.save_record(bench_args(tmp_path, variant="fast"), {}, "documents")  # --variant wins
    common.save_record(bench_args(tmp_path, bench="train", record=False), {})
    assert sorted(p.name for p in records.iterdir()) == ["predict-fast.json", "predict.json"]
    out = tmp_path / "figures.json"
    record = common.save_record(bench_args(tmp_path, record=False, json=str(out)), {"x": 1})
    assert json.loads(out.read_text()) == record and record["x"] == 1


def test_parse_names_the_record_after_the_benchmark_and_keeps_the_options():
    p = common.parser("a benchmark", "/somewhere/benchmarks/train.py")
    args = common.parse(p, ["--smoke", "--variant", "x"])
    assert (args.bench, args.argv, args.variant) == ("train", ["--smoke", "--variant", "x"], "x")
    assert (args.record, args.records) == (None, common.RECORDS)


def plant(records, name: str, cpu: str, flags: list[str], top: dict, command: str) -> None:
    machine = {"cpu": cpu, "cores": 2, "torch_threads": 2, "flags": flags, "load_1min": 0.1}
    path = records / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": command, "machine": machine, "headline": top}))


BLOCK = """<!-- bench:start rows=benchmarks/predict link=docs/runs
benchmarks/serve-onnx-int8: ner bench serve --ckpt C --backend onnx --quantize int8
benchmarks/train: ner bench train --steps 60
benchmarks/epoch
-->
{table}
<!-- bench:end -->"""
ROWS = [
    ["benchmark", "ours", "anchor", "ratio", "machine", "command"],
    ["tagging eng.testb as raw text, sentences/s"
     " ([benchmarks/predict](docs/runs/benchmarks/predict.json))",
     "948 (ours, bf16 autocast)", "252 (HF pipeline, fp32)", "3.76x",
     "Intel(R) Xeon(R) Platinum 8480+, AMX yes, AVX-512 bf16 yes, 2 cores",
     "`ner bench predict --ckpt F`"],
    ["one sentence a request, 32 clients, requests/s"
     " ([benchmarks/serve-onnx-int8](docs/runs/benchmarks/serve-onnx-int8.json))",
     "221 (ner serve (onnx int8))", "31.9 (FastAPI)", "6.93x",
     "AMD EPYC 9R14, AMX no, AVX-512 bf16 yes, 2 cores",
     "`ner bench serve --ckpt C --backend onnx --quantize int8`"],
    ["benchmarks/train", "not measured: run `ner bench train --steps 60`", "", "", "", ""],
    ["benchmarks/epoch", "not measured: run `ner bench epoch`", "", "", "", ""],
]  # fmt: skip
LINES = ["| " + " | ".join(row) + " |" for row in ROWS]
EXPECTED = "\n".join([LINES[0], "|---|---|---|---|---|---|", *LINES[1:]])


def plant_two(records) -> None:
    predict = {"figure": "tagging eng.testb as raw text", "unit": "sentences/s", "ours": 948.4,
               "ours_side": "ours, bf16 autocast", "anchor": 252.2,
               "anchor_side": "HF pipeline, fp32", "ratio": 948.4 / 252.2}  # fmt: skip
    plant(records, "benchmarks/predict", "Intel(R) Xeon(R) Platinum 8480+",
          ["amx_bf16", "amx_tile", "avx512_bf16"], predict,
          "ner bench predict --ckpt F")  # fmt: skip
    serve = {"figure": "one sentence a request, 32 clients", "unit": "requests/s", "ours": 221.0,
             "ours_side": "ner serve (onnx int8)", "anchor": 31.9, "anchor_side": "FastAPI",
             "ratio": 221.0 / 31.9}  # fmt: skip
    plant(records, "benchmarks/serve-onnx-int8", "AMD EPYC 9R14", ["avx512_bf16", "avx2"], serve,
          "ner bench serve --ckpt C --backend onnx --quantize int8")  # fmt: skip


def test_a_bench_block_renders_two_records_and_two_not_measured(tmp_path):
    records = tmp_path / "runs"
    plant_two(records)
    doc = "# speed\n" + BLOCK.format(table="| stale |") + "\nmore text\n"
    expected = "# speed\n" + BLOCK.format(table=EXPECTED) + "\nmore text\n"
    assert bench_records.fill(doc, records) == expected
    assert bench_records.fill(expected, records) == expected  # rendering again changes nothing


def test_render_check_fails_on_a_stale_bench_block_and_render_fills_it(tmp_path, capsys):
    records = tmp_path / "runs"
    plant_two(records)
    doc = tmp_path / "performance.md"
    doc.write_text("# speed\n" + BLOCK.format(table="| stale |") + "\n")
    render = ["results", "render", str(doc), "--records", str(records)]
    code, out, err = run_ner([*render, "--check"], capsys)
    assert (code, out) == (1, "")
    assert err == (f"error: {doc}: a bench block is not what the records render; run `ner"
                   " results render`\n")  # fmt: skip
    assert "| stale |" in doc.read_text()  # --check writes nothing
    assert run_ner(render, capsys)[:2] == (0, f"{doc}: rendered\n")
    assert doc.read_text() == "# speed\n" + BLOCK.format(table=EXPECTED) + "\n"
    assert run_ner([*render, "--check"], capsys)[:2] == (0, f"{doc}: up to date\n")


def test_a_record_without_an_anchor_has_dashes():
    top = {"figure": "moved", "unit": "sentences", "ours": 0, "ours_side": "onnx int8",
           "anchor": None, "anchor_side": None, "ratio": None}  # fmt: skip
    assert bench_records.side(top["ours"], top["ours_side"]) == "0 (onnx int8)"
    assert bench_records.side(top["anchor"], top["anchor_side"]) == "-"
    assert [bench_records.number(v) for v in (1231.4, 3.7605, 0.04123)] == ["1,231", "3.76",
                                                                             "0.0412"]  # fmt: skip
