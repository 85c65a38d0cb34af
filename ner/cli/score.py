"""`ner score CKPT [CKPT ...] --file CONLL`: entity F1 of checkpoints and of their ensemble on a
labelled file, at one or several weights of document consistency, from one pass of each model.

    ner score checkpoints/exp/default/seed-{1,2,3}/best.ckpt --file eng.testa --consistency 0 1 \
        --json runs/default-dev.json

Each checkpoint, and with `--ensemble` (the default for several) their ensemble (`ner tag
--ensemble`'s), is scored with the metric `ner test` uses, overall and per type, decoded at each
`--consistency` weight (default: each checkpoint's own, as `ner test` and `ner tag` decode it;
the ensemble at the first's). `--context-pieces N` reads N pieces of document context a side
instead of each checkpoint's own (what wider context is worth to models trained with less).
`--json` writes `{checkpoint or "ensemble": {weight: report}}`, what `ner results save --score`
keeps as a record.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ner.cli.main import summary
from ner.evaluation.metrics import MODES
from ner.evaluation.spread import types_of
from ner.inference.consistency import SURE
from ner.inference.scoring import Scores
from ner.model.scoring import score_checkpoints
from ner.utils.files import atomic_write


def parser() -> argparse.ArgumentParser:
    """The options of `ner score`."""
    p = argparse.ArgumentParser(prog="ner score", description=summary("score"))
    p.add_argument("checkpoints", nargs="+", help="checkpoint files (of one recipe to ensemble)")
    p.add_argument("--file", required=True, help="a labelled CoNLL file, e.g. eng.testa")
    p.add_argument(
        "--consistency", type=float, nargs="+", metavar="W",
        help="document-consistency weights to decode at (default: each checkpoint's own)",
    )  # fmt: skip
    p.add_argument(
        "--ensemble", action=argparse.BooleanOptionalAction, default=None,
        help="also score their ensemble (default: with several checkpoints)",
    )  # fmt: skip
    p.add_argument("--context-pieces", type=int, help="context a side (default: each model's)")
    p.add_argument("--sure", type=float, default=SURE, help=f"the gate (default {SURE}; >1: off)")
    p.add_argument("--metric-mode", choices=MODES, default="default", help="entity chunking")
    p.add_argument("--device", default="auto", help="auto (a GPU if there is one), cpu, cuda:N")
    p.add_argument("--json", help="write the scores here")
    return p


def table(scores: dict[str, Scores], file: str) -> str:
    """A markdown row per model and weight: F1, precision, recall and each type's F1 (points)."""
    first = next(iter(next(iter(scores.values())).values()))
    types = types_of(first)
    headers = [f"model ({Path(file).name})", "consistency", "F1", "precision", "recall", *types]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for name, by_weight in scores.items():
        for weight, report in by_weight.items():
            keys = ["f1", "precision", "recall", *(f"f1_{t}" for t in types)]
            cells = [name, weight, *(f"{100 * report[k]:.2f}" for k in keys)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Score; print the table (and write the JSON)."""
    args = parser().parse_args(argv)
    scores = score_checkpoints(
        args.checkpoints, args.file, args.consistency, args.ensemble, args.context_pieces,
        args.sure, args.metric_mode, args.device,
    )  # fmt: skip
    print(table(scores, args.file))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(args.json) as out:
            json.dump(scores, out, indent=2)
            out.write("\n")
    return 0
