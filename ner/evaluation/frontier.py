"""The depth frontier (`ner results frontier`): dev and test F1 against tagging speed, a row a
depth K, read from the runs' JSON under `RUNS/depthK/`:

- `seeds.json` (`ner seeds --test`): dev and test F1 per seed, fit seconds, the checkpoint;
- `predict.json` (`ner bench predict --ckpt ... --no-record --json ...`): sentences/s per side.

No torch; the plot is drawn by the command.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from ner.evaluation.records import markdown_table
from ner.utils.errors import NERError

SIDES = {"torch bf16": "ours, bf16 autocast", "onnx int8": "ours, onnx int8"}
HF = "HF pipeline, fp32"
START, END = "<!-- frontier:start -->", "<!-- frontier:end -->"


def depth_rows(runs: Path) -> list[dict]:
    """One record per depth folder `depthK` under `runs`, shallowest first."""
    rows = []
    for folder in Path(runs).glob("depth*"):
        match = re.fullmatch(r"depth(\d+)", folder.name)
        if not match:
            continue
        seeds = json.loads((folder / "seeds.json").read_text())["runs"]
        speed = json.loads((folder / "predict.json").read_text())["rows"]
        rate = {row["side"]: row["sentences/s"] for row in speed}
        rows.append({
            "depth": int(match.group(1)),
            "seeds": [r["seed"] for r in seeds],
            "dev": statistics.fmean(100 * r["dev"]["f1"] for r in seeds),
            "test": statistics.fmean(100 * r["test"]["f1"] for r in seeds),
            "fit_min": statistics.fmean(r["fit_s"] for r in seeds) / 60,
            "ckpt_mb": statistics.fmean(Path(r["checkpoint"]).stat().st_size for r in seeds) / 1e6,
            **{name: rate[side] for name, side in SIDES.items()},
            "hf": rate[HF],
        })  # fmt: skip
    if not rows:
        raise NERError("no depthK folders", path=str(runs))
    return sorted(rows, key=lambda r: r["depth"])


def number(value: Any) -> str:
    """A speed cell: thousands separated, no decimals from 100 up, else 3 significant digits."""
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def table(rows: list[dict]) -> str:
    """The markdown table; speed ratios against the HF pipeline on the full (deepest) encoder."""
    full_hf = rows[-1]["hf"]
    headers = ["encoder layers", "seeds", "dev F1", "test F1", "fit min", "best.ckpt MB",
               "torch bf16 sent/s", "onnx int8 sent/s", "HF pipeline sent/s (same layers)",
               f"torch bf16 vs HF {rows[-1]['depth']} layers"]  # fmt: skip
    body = [[r["depth"], ", ".join(map(str, r["seeds"])), f"{r['dev']:.2f}", f"{r['test']:.2f}",
             f"{r['fit_min']:.1f}", f"{r['ckpt_mb']:.0f}", number(r["torch bf16"]),
             number(r["onnx int8"]), number(r["hf"]), f"{r['torch bf16'] / full_hf:.2f}x"]
            for r in rows]  # fmt: skip
    return markdown_table(headers, body)
