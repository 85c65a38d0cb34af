"""`ner results`: the runs' records (`docs/runs/`) and the docs' tables rendered from them
(`ner.evaluation.records`); nothing in those tables is typed by hand.

    ner results save NAME --seeds runs/exp/NAME/seeds.json --label TEXT [--command C]
    ner results save NAME --hf runs/small/hf-fp32 --label TEXT [--command C]
    ner results save NAME --score DEV.json [TEST.json] [--weight W] [--of-ensemble] --label TEXT
    ner results render [--check] [FILE ...]
    ner results frontier [--runs runs/frontier] [--doc docs/results.md] [--plot docs/frontier.png]

`save` keeps a run as `docs/runs/NAME.json`: from `ner seeds`' `seeds.json` (with the config the
seeds trained with, for `ner seeds --from-record`), from the `seed-S.json` files of `ner bench
hf_recipe`, or from `ner score --json` of dev (and test) at one weight: a row a checkpoint (its
seed read from `seed-N` in its path), or with `--of-ensemble` the ensemble's. `render` fills
every results block and every bench block (the speed tables, from the records `ner bench`
writes: `ner.evaluation.bench_records`) of the files (default: docs/results.md, README.md and
docs/performance.md); `--check` fails if one is not what the records render. `frontier` prints
the depth frontier's table (`ner.evaluation.frontier`), puts it between the frontier markers of
`--doc` and draws `--plot`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ner.cli.main import summary
from ner.evaluation import bench_records, frontier, records
from ner.layer_analysis.plots import new_figure, save_figure
from ner.utils.errors import NERError
from ner.utils.files import atomic_write

REPOSITORY = Path(__file__).resolve().parents[2]
RECORDS = REPOSITORY / "docs" / "runs"
# the files with results or bench blocks
DOCS = [
    REPOSITORY / "docs" / "results.md",
    REPOSITORY / "README.md",
    REPOSITORY / "docs" / "performance.md",
]


def parser() -> argparse.ArgumentParser:
    """The options of `ner results` and its three actions."""
    p = argparse.ArgumentParser(prog="ner results", description=summary("results"))
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("save", help="keep a run's figures as docs/runs/NAME.json")
    s.add_argument("name", help="the record's name under --records (e.g. ladder/epochs5)")
    source = s.add_mutually_exclusive_group(required=True)
    source.add_argument("--seeds", type=Path, help="a `ner seeds` seeds.json")
    source.add_argument("--hf", type=Path, help="a folder of `ner bench hf_recipe` seed-S.json")
    source.add_argument("--score", type=Path, nargs="+", help="`ner score --json`: dev [test]")
    s.add_argument("--weight", type=float, help="--score: the consistency weight to keep")
    s.add_argument("--of-ensemble", action="store_true", help="--score: the ensemble's row")
    s.add_argument("--label", required=True, help="the run's name in the tables")
    s.add_argument("--command", default="", help="the command that made the run")
    s.add_argument("--records", type=Path, default=RECORDS, help="(default: docs/runs)")
    r = sub.add_parser("render", help="fill the results and bench blocks of markdown files")
    r.add_argument("files", nargs="*", type=Path, default=DOCS)
    r.add_argument("--check", action="store_true", help="fail if a block is not up to date")
    r.add_argument("--records", type=Path, default=RECORDS, help="(default: docs/runs)")
    f = sub.add_parser("frontier", help="the depth frontier's table and plot")
    f.add_argument("--runs", type=Path, default=Path("runs/frontier"), help="its depthK folders")
    f.add_argument("--doc", type=Path, help="a markdown file with a frontier block to fill")
    f.add_argument("--plot", type=Path, help="write the plot (PNG) here")
    return p


def save(args: argparse.Namespace) -> None:
    """`ner results save`: the record's path on stdout."""
    config = None
    if not args.score and (args.weight is not None or args.of_ensemble):
        raise NERError("--weight and --of-ensemble choose among the rows of --score")
    if args.seeds:
        runs, config = records.seeds_runs(args.seeds)
    elif args.hf:
        runs = records.hf_runs(args.hf)
    else:
        if len(args.score) > 2:
            raise NERError("the dev JSON and at most a test JSON", path="--score")
        runs = records.score_runs(args.score, args.weight, args.of_ensemble)
    print(records.save(args.name, runs, args.label, args.command, args.records, config))


def render(files: list[Path], check: bool, found: Path) -> int:
    """`ner results render [--check]`: each file's state on stdout; with `--check`, exit code 1
    and a one-line error at the first stale file (a failed check, not bad input: not 2)."""
    for path in files:
        before, results = records.render(path, found)
        after = bench_records.fill(results, found)
        stale = "results" if before != results else "bench" if results != after else None
        if check and stale:
            print(f"error: {path}: a {stale} block is not what the records render; run `ner"
                  " results render`", file=sys.stderr)  # fmt: skip
            return 1
        if before != after:
            with atomic_write(path) as out:
                out.write(after)
        print(f"{path}: {'up to date' if before == after else 'rendered'}")
    return 0


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


def main(argv: list[str]) -> int:
    """Save a record, render the docs' tables, or the depth frontier."""
    args = parser().parse_args(argv)
    if args.action == "save":
        save(args)
    elif args.action == "render":
        return render(args.files, args.check, args.records)
    else:
        rows = frontier.depth_rows(args.runs)
        text = frontier.table(rows)
        print(text)
        if args.doc:
            records.replace_block(args.doc, frontier.START, frontier.END, text)
        if args.plot:
            plot(rows, args.plot)
    return 0
