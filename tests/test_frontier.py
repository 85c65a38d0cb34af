"""`ner results frontier`: the depth frontier's table and plot come from the runs' JSON, figures
checked against values computed here from the planted files."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import one_line_error, run_ner

from benchmarks.common import parse_table


def _plant(runs: Path, depth: int, dev: list[float], test: list[float], rates: tuple) -> None:
    folder = runs / f"depth{depth}"
    folder.mkdir(parents=True)
    seeds = []
    for seed, (d, t) in enumerate(zip(dev, test, strict=True), 1):
        ckpt = folder / f"seed-{seed}.ckpt"
        ckpt.write_bytes(b"x" * (depth * 1_000_000))
        seeds.append({"seed": seed, "fit_s": 60.0 * depth, "checkpoint": str(ckpt),
                      "dev": {"f1": d}, "test": {"f1": t}})  # fmt: skip
    (folder / "seeds.json").write_text(json.dumps({"runs": seeds}))
    sides = ("ours, bf16 autocast", "ours, onnx int8", "ours, fp32", "HF pipeline, fp32")
    rows = [{"side": s, "sentences/s": r} for s, r in zip(sides, rates, strict=True)]
    (folder / "predict.json").write_text(json.dumps({"rows": rows}))


def test_the_table_and_plot_come_from_the_runs(tmp_path, capsys):
    runs = tmp_path / "runs"
    _plant(runs, 6, [0.91, 0.93], [0.88, 0.90], (800.0, 600.0, 300.0, 250.0))
    _plant(runs, 2, [0.85], [0.80], (2000.0, 1500.0, 900.0, 700.0))
    (runs / "depth2.log").write_text("not a run folder")
    results = tmp_path / "results.md"
    results.write_text("before\n<!-- frontier:start -->\nold\n<!-- frontier:end -->\nafter\n")
    plot = tmp_path / "f.png"
    code, out, err = run_ner(["results", "frontier", "--runs", str(runs), "--doc", str(results),
                              "--plot", str(plot)], capsys)  # fmt: skip
    assert code == 0, err
    headers, rows = parse_table(out)
    assert headers[0] == "encoder layers" and headers[-1] == "torch bf16 vs HF 6 layers"
    assert rows[0] == ["2", "1", "85.00", "80.00", "2.0", "2", "2,000", "1,500", "700", "8.00x"]
    assert rows[1] == ["6", "1, 2", "92.00", "89.00", "6.0", "6", "800", "600", "250", "3.20x"]
    doc = results.read_text()
    assert doc.startswith("before\n<!-- frontier:start -->\n| encoder layers")
    assert doc.endswith("<!-- frontier:end -->\nafter\n") and "old" not in doc
    from PIL import Image

    with Image.open(plot) as image:
        assert image.size == (int(6.4 * 120), int(4.2 * 120))


def test_a_missing_block_or_run_is_a_one_line_error(tmp_path, capsys):
    code, _, err = run_ner(["results", "frontier", "--runs", str(tmp_path)], capsys)
    assert "no depthK folders" in one_line_error(code, err)
    _plant(tmp_path / "runs", 3, [0.9], [0.9], (1.0, 1.0, 1.0, 1.0))
    (tmp_path / "r.md").write_text("no block\n")
    code, _, err = run_ner(["results", "frontier", "--runs", str(tmp_path / "runs"), "--doc",
                            str(tmp_path / "r.md")], capsys)  # fmt: skip
    assert "no <!-- frontier:start -->" in one_line_error(code, err)
    assert (tmp_path / "r.md").read_text() == "no block\n"
