"""The docs' speed tables, rendered from the benchmarks' records (`ner results render`): nothing
in them is typed by hand. No torch.

`ner bench NAME` writes `docs/runs/benchmarks/NAME[-VARIANT].json`: the command that made it,
the machine, the versions, every figure it printed, and its `headline` (ours against the
anchor, in one unit). A markdown block

    <!-- bench:start rows=benchmarks/predict,benchmarks/train link=docs/runs
    benchmarks/serve-onnx-int8: ner bench serve --ckpt CKPT --backend onnx --quantize int8
    -->
    <!-- bench:end -->

is one row a record: benchmark | ours | anchor | ratio | machine | command. Its rows are those
of `rows=`, then those of the lines `NAME: COMMAND`, which also give the command that makes a
record not measured yet: such a row says so and names the command (without one, `ner bench`
and the benchmark's name). `link=PATH` is where the record links point (default `runs`, as seen
from docs/).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ner.evaluation.records import markdown_table
from ner.utils.errors import NERError

BLOCK = re.compile(r"<!-- bench:start(?P<spec>.*?)-->\n.*?<!-- bench:end -->", re.S)
HEADERS = ["benchmark", "ours", "anchor", "ratio", "machine", "command"]


def parse_spec(spec: str) -> tuple[dict[str, str], dict[str, str | None]]:
    """(the first line's `key=value` options, {record name: its command or None} in order)."""
    first, *rest = spec.split("\n")  # the options share the line of `bench:start`
    if any("=" not in part for part in first.split()):
        raise NERError(f"a bench block's first line holds key=value options, not {first!r}")
    options = dict(part.split("=", 1) for part in first.split())
    rows: dict[str, str | None] = {
        name: None for name in options.get("rows", "").split(",") if name
    }
    for line in rest:
        name, _, command = line.partition(":")
        if name.strip():
            rows[name.strip()] = command.strip() or None
    return options, rows


def number(value: float) -> str:
    """A figure with 3 significant digits, thousands separated (1,231; 3.76; 0.0412)."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def machine_cell(machine: dict) -> str:
    """CPU model, whether it has AMX and AVX-512 bf16 (bf16 and int8 in hardware), cores."""
    flags = set(machine.get("flags", ()))
    amx = "yes" if flags & {"amx_bf16", "amx_tile"} else "no"
    bf16 = "yes" if "avx512_bf16" in flags else "no"
    return f"{machine['cpu']}, AMX {amx}, AVX-512 bf16 {bf16}, {machine['cores']} cores"


def side(value: float | None, name: str | None) -> str:
    """A figure with the side that made it: `948 (ours, bf16 autocast)`; `-` for none."""
    return "-" if value is None else f"{number(value)} ({name})" if name else number(value)


def row(name: str, command: str | None, records: Path, link: str) -> list[str]:
    """One record's row; a record not measured yet says which command makes it."""
    path = records / f"{name}.json"
    if not path.is_file():
        command = command or f"ner bench {Path(name).name.split('-')[0]}"
        return [name, f"not measured: run `{command}`", "", "", "", ""]
    record = json.loads(path.read_text(encoding="utf-8"))
    top = record["headline"]
    ratio = "-" if top.get("ratio") is None else f"{top['ratio']:.2f}x"
    return [
        f"{top['figure']}, {top['unit']} ([{name}]({link}/{name}.json))",
        side(top["ours"], top.get("ours_side")),
        side(top.get("anchor"), top.get("anchor_side")),
        ratio,
        machine_cell(record["machine"]),
        f"`{record['command']}`",
    ]


def table(spec: str, records: Path) -> str:
    """The markdown table a block's spec asks for."""
    options, rows = parse_spec(spec)
    link = options.get("link", "runs")
    return markdown_table(HEADERS, [row(n, c, records, link) for n, c in rows.items()])


def fill(text: str, records: Path) -> str:
    """`text` with every bench block rendered from the records under `records`."""

    def one(match: re.Match) -> str:
        spec = match.group("spec")
        return f"<!-- bench:start{spec}-->\n{table(spec, records)}\n<!-- bench:end -->"

    return BLOCK.sub(one, text)
