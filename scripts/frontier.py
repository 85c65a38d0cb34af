"""The depth frontier, from its runs' JSON: a table (markdown) and a plot of dev F1 against
tagging sentences/s, a point per depth and backend.

    python scripts/frontier.py [--runs runs/frontier] [--results docs/results.md]
                               [--plot docs/frontier.png]

Reads, for each depth K found as `RUNS/depthK/`:
- `seeds.json` (`ner seeds --test`): dev and test F1 per seed, fit seconds, the checkpoint;
- `predict.json` (`python -m benchmarks.predict --ckpt ... --json ...`): sentences/s per side.

Prints the table; with --results, replaces the block between `<!-- frontier:start -->` and
`<!-- frontier:end -->` of that file with it (nothing is typed by hand). `scripts/frontier.sh`
makes the runs.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import markdown_table  # noqa: E402 (the repository root goes first)
from ner.layer_analysis.plots import new_figure, save_figure  # noqa: E402
from ner.utils.files import atomic_write  # noqa: E402

SIDES = {"torch bf16": "ours, bf16 autocast", "onnx int8": "ours, onnx int8"}
HF = "HF pipeline, fp32"
START, END = "<!-- frontier:start -->", "<!-- frontier:end -->"


def depth_rows(runs: Path) -> list[dict]:
    """One record per depth folder `depthK` under `runs`, shallowest first."""
    rows = []
    for folder in runs.glob("depth*"):
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
        raise SystemExit(f"{runs}: no depthK folders")
    return sorted(rows, key=lambda r: r["depth"])


def table(rows: list[dict]) -> str:
    """The markdown table; speed ratios against the HF pipeline on the full (deepest) encoder."""
    full_hf = rows[-1]["hf"]
    headers = ["encoder layers", "seeds", "dev F1", "test F1", "fit min", "best.ckpt MB",
               "torch bf16 sent/s", "onnx int8 sent/s", "HF pipeline sent/s (same layers)",
               f"torch bf16 vs HF {rows[-1]['depth']} layers"]  # fmt: skip
    body = [[r["depth"], ", ".join(map(str, r["seeds"])), f"{r['dev']:.2f}", f"{r['test']:.2f}",
             f"{r['fit_min']:.1f}", f"{r['ckpt_mb']:.0f}", r["torch bf16"], r["onnx int8"],
             r["hf"], f"{r['torch bf16'] / full_hf:.2f}x"] for r in rows]  # fmt: skip
    return markdown_table(headers, body)


def plot(rows: list[dict], path: Path) -> None:
    """Dev F1 against sentences/s: a marker per backend, each point labelled with its depth."""
    fig = new_figure(6.4, 4.2)
    ax = fig.add_subplot()
    for (name, marker), colour in zip((("torch bf16", "o"), ("onnx int8", "s")), ("C0", "C1"),
                                      strict=True):  # fmt: skip
        xs, ys = [r[name] for r in rows], [r["dev"] for r in rows]
        ax.plot(xs, ys, marker=marker, color=colour, label=f"ours, {name}")
        for r, x, y in zip(rows, xs, ys, strict=True):
            ax.annotate(f"K={r['depth']}", (x, y), textcoords="offset points", xytext=(4, -10),
                        fontsize=8)  # fmt: skip
    ax.axvline(rows[-1]["hf"], color="grey", linestyle="--",
               label=f"HF pipeline fp32, {rows[-1]['depth']} layers")  # fmt: skip
    ax.set_xlabel("eng.testb sentences tagged per second (raw text)")
    ax.set_ylabel("dev F1 (eng.testa)")
    ax.set_title("Encoder depth: accuracy against speed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    save_figure(fig, path, dpi=120)


def replace_block(path: Path, text: str) -> None:
    """Put `text` between the frontier markers of `path`."""
    doc = path.read_text(encoding="utf-8")
    if START not in doc or END not in doc:
        raise SystemExit(f"{path}: no {START} ... {END} block")
    head, rest = doc.split(START, 1)
    with atomic_write(path) as out:
        out.write(f"{head}{START}\n{text}\n{END}{rest.split(END, 1)[1]}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "frontier")
    p.add_argument("--results", type=Path, help="a markdown file with a frontier block")
    p.add_argument("--plot", type=Path, help="write the plot (PNG) here")
    args = p.parse_args(argv)
    rows = depth_rows(args.runs)
    text = table(rows)
    print(text)
    if args.results:
        replace_block(args.results, text)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
