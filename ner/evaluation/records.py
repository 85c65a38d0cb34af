"""The runs' records and the results tables of the docs rendered from them (`ner results`):
nothing in those tables is typed by hand. No torch.

A record (`docs/runs/NAME.json`) keeps what a table needs of a run: its label, the command that
made it, per seed the dev and test F1 overall and per type and the fit seconds (`runs`), and,
where known, the resolved `ner fit` config it trained with (`config`, what `ner seeds
--from-record` re-runs). Records of runs whose JSON was not kept hold only the published
`summary` and say so (`source`). A markdown block between

    <!-- results:start splits=dev,test rows=NAME,NAME,... -->  and  <!-- results:end -->

is one row a record (mean ± sample std over its seeds); `types=none` keeps only the overall F1
columns, `link=PATH` is where the record links point (default `runs`, as seen from docs/),
`commands=yes` adds each record's command.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ner.evaluation.spread import cell, summary
from ner.utils.errors import NERError
from ner.utils.files import atomic_write

BLOCK = re.compile(r"<!-- results:start (?P<spec>[^>]*?) -->\n.*?<!-- results:end -->", re.S)
ENSEMBLE = "ensemble"  # `ner score`'s name for the ensemble; its record's seeds column


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table of text cells."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _kept(report: dict) -> dict:
    return {k: v for k, v in report.items() if k == "f1" or k.startswith("f1_")}


def save(
    name: str,
    runs: list[dict],
    label: str,
    command: str,
    records: Path,
    config: dict | None = None,
) -> Path:
    """Write `records/NAME.json`: the label, the command, per seed what the tables read, and
    the resolved config the runs trained with (if given)."""
    kept = []
    for run in runs:
        one = {"seed": run["seed"]}
        if "fit_s" in run:
            one["fit_s"] = round(float(run["fit_s"]), 1)
        one |= {split: _kept(run[split]) for split in ("dev", "test") if split in run}
        kept.append(one)
    record: dict[str, Any] = {"label": label, "command": command, "runs": kept}
    if config is not None:
        record["config"] = config
    path = records / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as out:
        json.dump(record, out, indent=1)
        out.write("\n")
    return path


def seeds_runs(path: Path) -> tuple[list[dict], dict | None]:
    """The runs of a `ner seeds` summary (`runs/NAME/seeds.json`) and the config they share."""
    found = json.loads(Path(path).read_text(encoding="utf-8"))
    return found["runs"], found.get("config")


def hf_runs(folder: Path) -> list[dict]:
    """The runs of a folder of `ner bench hf_recipe` results (`seed-S.json`)."""
    files = sorted(Path(folder).glob("seed-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    if not files:
        raise NERError("no seed-S.json here", path=str(folder))
    return [json.loads(p.read_text(encoding="utf-8")) for p in files]


def score_runs(files: Sequence[Path], weight: float | None, of_ensemble: bool) -> list[dict]:
    """The rows of `ner score --json` files (dev, and test if given) at one consistency weight
    (None: the one weight they hold): one a checkpoint (its seed read from `seed-N` in its
    path), or with `of_ensemble` the ensemble's one row. A file of `{name: report}` (scored at
    one weight, before the weights were keys) is read as it is."""
    scored = [json.loads(Path(p).read_text(encoding="utf-8")) for p in files]
    runs = []
    for name in scored[0]:
        if (name == ENSEMBLE) != of_ensemble:
            continue
        found = re.search(r"seed-(\d+)", name)
        seed = ENSEMBLE if of_ensemble else int(found.group(1)) if found else name
        pairs = zip(("dev", "test"), scored, strict=False)  # test is optional
        runs.append({"seed": seed} | {split: _at(s, name, weight) for split, s in pairs})
    if not runs:
        what = ENSEMBLE if of_ensemble else "checkpoint"
        raise NERError(f"no {what} scored in it", path=str(files[0]))
    return runs


def _at(scored: dict, name: str, weight: float | None) -> dict:
    """`name`'s report at `weight` in one `ner score` file."""
    entry = scored.get(name)
    if entry is None:
        raise NERError(f"no figures of {name}")
    if "f1" in entry:  # one report, no weights
        return entry
    if weight is None:
        if len(entry) != 1:
            raise NERError(f"{name} is scored at weights {', '.join(entry)}: give --weight")
        return next(iter(entry.values()))
    if str(float(weight)) not in entry:
        raise NERError(f"no figures of {name} at weight {float(weight)}")
    return entry[str(float(weight))]


def stats_of(record: dict) -> dict:
    """Mean ± std (points) per split and type, and fit seconds: from the runs, or as kept."""
    return summary(record["runs"]) if "runs" in record else record["summary"]


def load(name: str, records: Path) -> dict:
    """The record `records/NAME.json`."""
    path = records / f"{name}.json"
    if not path.is_file():
        raise NERError("no such record", path=str(path))
    return json.loads(path.read_text(encoding="utf-8"))


def table(spec: str, records: Path) -> str:
    """The markdown table a block's `splits=... rows=...` spec asks for."""
    options = dict(part.split("=", 1) for part in spec.split())
    splits, names = options["splits"].split(","), options["rows"].split(",")
    loaded = [load(n, records) for n in names]
    stats = [stats_of(r) for r in loaded]
    types = sorted({k[3:] for s in stats for k in s[splits[0]] if k.startswith("f1_")})
    if options.get("types") == "none":
        types = []
    commands = options.get("commands") == "yes"
    headers = ["run", "seeds"]
    for split in splits:
        headers += [f"{split} F1"] + [f"{split} {t}" for t in types]
    headers += ["fit s", "record"] + (["command"] if commands else [])
    rows = []
    for name, record, stat in zip(names, loaded, stats, strict=True):
        cells = [record["label"], " ".join(map(str, stat["seeds"]))]
        for split in splits:
            keys = ["f1"] + [f"f1_{t}" for t in types]
            cells += [cell(tuple(stat[split][k])) if k in stat[split] else "" for k in keys]
        fit = stat.get("fit_s")
        cells += [cell(tuple(fit), digits=0) if fit else "", _link(name, record, options)]
        if commands:
            cells.append(f"`{record['command']}`" if record.get("command") else "")
        rows.append(cells)
    return markdown_table(headers, rows)


def _link(name: str, record: dict, options: dict[str, str]) -> str:
    mark = " (summary only)" if "runs" not in record else ""
    return f"[{name}]({options.get('link', 'runs')}/{name}.json){mark}"


def render(path: Path, records: Path) -> tuple[str, str]:
    """(the file's text, the text with every results block rendered)."""
    text = Path(path).read_text(encoding="utf-8")

    def fill(match: re.Match) -> str:
        spec = match.group("spec")
        return f"<!-- results:start {spec} -->\n{table(spec, records)}\n<!-- results:end -->"

    return text, BLOCK.sub(fill, text)


def replace_block(path: Path, start: str, end: str, text: str) -> None:
    """Put `text` between the lines `start` and `end` of the markdown file `path`."""
    doc = Path(path).read_text(encoding="utf-8")
    if start not in doc or end not in doc:
        raise NERError(f"no {start} ... {end} block", path=str(path))
    head, rest = doc.split(start, 1)
    with atomic_write(path) as out:
        out.write(f"{head}{start}\n{text}\n{end}{rest.split(end, 1)[1]}")
