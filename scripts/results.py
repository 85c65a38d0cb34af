"""The results tables of the docs, rendered from the runs' records in `docs/runs/` (nothing typed
by hand).

    python scripts/results.py save NAME --seeds runs/exp/STEP/seeds.json --label TEXT [--command C]
    python scripts/results.py save NAME --hf runs/small/hf-fp32 --label TEXT [--command C]
    python scripts/results.py save NAME --ensemble DEV.json [TEST.json] --label TEXT [--command C]
    python scripts/results.py save NAME --consistency DEV.json [TEST.json] --weight W
                                   [--of-ensemble] --label TEXT [--command C]
    python scripts/results.py render [--check] [docs/results.md ...]

`save` keeps what a table needs of a run (per seed: dev and test F1 overall and per type, fit
seconds) as `docs/runs/NAME.json`, from `ner seeds`' `seeds.json`, from the `seed-S.json` files
of `python -m benchmarks.hf_recipe`, or from `scripts/ensemble.py --json` of dev (and test): the
ensemble's row, its seeds column the word `ensemble`, or from `scripts/consistency.py --json`
at one weight: a row a checkpoint (its seed read from `seed-N` in its path), or with
`--of-ensemble` the ensemble's row. `render` fills every block of a markdown
file between

    <!-- results:start splits=dev,test rows=NAME,NAME,... -->  and  <!-- results:end -->

with one row a record (mean ± sample std over its seeds); `types=none` keeps only the overall F1
columns, `link=PATH` is where the record links point (default `runs`, as seen from docs/),
`commands=yes` adds each record's command; `--check` fails if any block differs.
Records of runs whose JSON was not kept hold only the published summary and say so (`source`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import markdown_table  # noqa: E402 (the repository root goes first)
from ner.evaluation.spread import cell, summary  # noqa: E402
from ner.utils.files import atomic_write  # noqa: E402

RECORDS = ROOT / "docs" / "runs"
DOCS = [ROOT / "docs" / "results.md", ROOT / "README.md"]  # the files with results blocks
BLOCK = re.compile(r"<!-- results:start (?P<spec>[^>]*?) -->\n.*?<!-- results:end -->", re.S)


def _kept(report: dict) -> dict:
    return {k: v for k, v in report.items() if k == "f1" or k.startswith("f1_")}


def save(name: str, runs: list[dict], label: str, command: str, records: Path = RECORDS) -> Path:
    """Write `records/NAME.json`: the label, the command and per seed what the tables read."""
    kept = []
    for run in runs:
        one = {"seed": run["seed"]}
        if "fit_s" in run:
            one["fit_s"] = round(float(run["fit_s"]), 1)
        one |= {split: _kept(run[split]) for split in ("dev", "test") if split in run}
        kept.append(one)
    path = records / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as out:
        json.dump({"label": label, "command": command, "runs": kept}, out, indent=1)
        out.write("\n")
    return path


def load_runs(seeds: Path | None, hf: Path | None, ensemble: list[Path] | None = None) -> list:
    """The runs of a `ner seeds` summary file, of a folder of HF recipe `seed-S.json`, or the
    one row of an ensemble scored on dev (and test) by `scripts/ensemble.py --json`."""
    if seeds is not None:
        return json.loads(seeds.read_text())["runs"]
    if ensemble:
        scored = [json.loads(p.read_text())["ensemble"] for p in ensemble]
        return [{"seed": "ensemble"} | dict(zip(("dev", "test"), scored, strict=False))]
    files = sorted(hf.glob("seed-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    if not files:
        raise SystemExit(f"{hf}: no seed-S.json")
    return [json.loads(p.read_text()) for p in files]


def consistency_runs(files: list[Path], weight: float, of_ensemble: bool) -> list[dict]:
    """The rows of `scripts/consistency.py --json` files (dev [test]) at one weight: each
    checkpoint's (seed from `seed-N` in its path) or the ensemble's."""
    scored = [json.loads(p.read_text()) for p in files]
    runs = []
    for name in scored[0]:
        if (name == "ensemble") != of_ensemble:
            continue
        found = re.search(r"seed-(\d+)", name)
        seed = "ensemble" if of_ensemble else int(found.group(1)) if found else name
        try:
            pairs = zip(("dev", "test"), scored, strict=False)  # test is optional
            splits = {split: s[name][str(weight)] for split, s in pairs}
        except KeyError as missing:
            raise SystemExit(f"{files}: no figures of {missing} at weight {weight}") from None
        runs.append({"seed": seed} | splits)
    return runs


def stats_of(record: dict) -> dict:
    """Mean ± std (points) per split and type, and fit seconds: from the runs, or as kept."""
    return summary(record["runs"]) if "runs" in record else record["summary"]


def table(spec: str, records: Path = RECORDS) -> str:
    """The markdown table a block's `splits=... rows=...` spec asks for."""
    options = dict(part.split("=", 1) for part in spec.split())
    splits, names = options["splits"].split(","), options["rows"].split(",")
    loaded = [json.loads((records / f"{n}.json").read_text()) for n in names]
    stats = [stats_of(r) for r in loaded]
    types = sorted({k[3:] for s in stats for k in s[splits[0]] if k.startswith("f1_")})
    if options.get("types") == "none":
        types = []
    headers = ["run", "seeds"]
    for split in splits:
        headers += [f"{split} F1"] + [f"{split} {t}" for t in types]
    headers += ["fit s", "record"] + (["command"] if options.get("commands") == "yes" else [])
    rows = []
    for name, record, stat in zip(names, loaded, stats, strict=True):
        cells = [record["label"], " ".join(map(str, stat["seeds"]))]
        for split in splits:
            keys = ["f1"] + [f"f1_{t}" for t in types]
            cells += [cell(tuple(stat[split][k])) if k in stat[split] else "" for k in keys]
        fit = stat.get("fit_s")
        link = _record_cell(name, record, options.get("link", "runs"))
        cells += [cell(tuple(fit), digits=0) if fit else "", link]
        if options.get("commands") == "yes":
            cells.append(f"`{record['command']}`" if record.get("command") else "")
        rows.append(cells)
    return markdown_table(headers, rows)


def _record_cell(name: str, record: dict, link: str) -> str:
    mark = " (summary only)" if "runs" not in record else ""
    return f"[{name}]({link}/{name}.json){mark}"


def render(path: Path, records: Path = RECORDS) -> tuple[str, str]:
    """(the file's text, the text with every results block rendered)."""
    text = path.read_text(encoding="utf-8")

    def fill(match: re.Match) -> str:
        spec = match.group("spec")
        return f"<!-- results:start {spec} -->\n{table(spec, records)}\n<!-- results:end -->"

    return text, BLOCK.sub(fill, text)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("save", help="keep a run's figures as docs/runs/NAME.json")
    s.add_argument("name")
    s.add_argument("--seeds", type=Path, help="a `ner seeds` seeds.json")
    s.add_argument("--hf", type=Path, help="a folder of benchmarks.hf_recipe seed-S.json")
    s.add_argument("--ensemble", type=Path, nargs="+", help="scripts/ensemble.py JSON: dev [test]")
    s.add_argument("--consistency", type=Path, nargs="+", help="scripts/consistency.py JSON")
    s.add_argument("--weight", type=float, help="--consistency: the weight to keep")
    s.add_argument("--of-ensemble", action="store_true", help="--consistency: the ensemble's")
    s.add_argument("--label", required=True)
    s.add_argument("--command", default="", help="the command that made the run")
    s.add_argument("--records", type=Path, default=RECORDS, help="(default: docs/runs)")
    r = sub.add_parser("render", help="fill the results blocks of markdown files")
    r.add_argument("files", nargs="*", type=Path, default=DOCS)
    r.add_argument("--check", action="store_true", help="fail if a block is not up to date")
    args = p.parse_args(argv)
    if args.action == "save":
        sources = (args.seeds, args.hf, args.ensemble, args.consistency)
        if sum(x is not None for x in sources) != 1:
            raise SystemExit("give one of --seeds, --hf, --ensemble and --consistency")
        if len(args.ensemble or args.consistency or []) > 2:
            raise SystemExit("--ensemble, --consistency: the dev JSON and at most a test JSON")
        if args.consistency and args.weight is None:
            raise SystemExit("--consistency needs --weight")
        if args.consistency:
            runs = consistency_runs(args.consistency, args.weight, args.of_ensemble)
        else:
            runs = load_runs(args.seeds, args.hf, args.ensemble)
        print(save(args.name, runs, args.label, args.command, args.records))
        return
    for path in args.files:
        before, after = render(path)
        if args.check and before != after:
            raise SystemExit(f"{path}: a results block is not what docs/runs/ renders")
        if not args.check and before != after:
            with atomic_write(path) as out:
                out.write(after)
        print(f"{path}: {'up to date' if before == after else 'rendered'}")


if __name__ == "__main__":
    main()
