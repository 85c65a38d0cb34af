"""`ner distill`: train students on an ensemble's soft targets (`ner.model.distill`), over seeds,
each scored as `ner seeds` scores it.

    ner distill --teachers checkpoints/exp/default/seed-{1,2,3}/best.ckpt [--weight 0.5]
        [--seeds 1 2 3] [--test] [--experiment NAME | --from-record RECORD | -c CONFIG]
        [--run NAME] [fit options]

The student's recipe is the one given (the offline default unless `-c` or `--experiment` says
otherwise); its data settings must be the teachers' (labels, tokenizer, windows), which it checks
before training. Students land in `checkpoints/distill/NAME/seed-S/` (NAME: the experiment, else
the config's name), apart from their teachers; the table in `runs/distill/NAME/seeds.md`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ner.cli import seeds
from ner.cli.lightning import CONFIGS_DIR
from ner.cli.main import summary as command_summary
from ner.utils.errors import NERError


def parser() -> argparse.ArgumentParser:
    """The options of `ner distill` (the rest go to `ner seeds`, then to `ner fit`)."""
    p = argparse.ArgumentParser(prog="ner distill", description=command_summary("distill"))
    p.add_argument("--teachers", nargs="+", required=True, help="the ensemble's checkpoints")
    p.add_argument("--weight", type=float, default=0.5, help="share of the distillation loss")
    return p


def seeds_args(args: argparse.Namespace, rest: list[str]) -> list[str]:
    """`ner seeds` arguments: `rest`, a run name under `distill/` unless one is given, and the
    teacher as the model's `teacher` option."""
    known, _ = seeds.parser().parse_known_args(rest)
    named = [*known.experiment, *(Path(r).stem for r in known.from_record)]
    if len(named) > 1:
        raise NERError("students of one recipe at a time", path="--experiment")
    if not seeds.has_config(rest) and not named:  # the offline default's recipe
        rest = ["-c", str(CONFIGS_DIR / "conll2003-minilm.yaml"), *rest]
    if not any(a == "--run" or a.startswith("--run=") for a in rest):
        name = named[0] if named else seeds.run_name(*seeds.parser().parse_known_args(rest))
        rest = [*rest, "--run", f"distill/{name}"]
    teacher = {
        "class_path": "ner.model.distill.Teacher",
        "init_args": {"checkpoints": list(args.teachers), "weight": args.weight},
    }
    return [*rest, f"--model.teacher={json.dumps(teacher)}"]


def main(argv: list[str]) -> int:
    """Distil, seed by seed, and print the students' table."""
    args, rest = parser().parse_known_args(argv)
    for path in args.teachers:  # before any training starts
        if not Path(path).is_file():
            raise NERError("no such checkpoint file", path=path)
    return seeds.main(seeds_args(args, rest))
