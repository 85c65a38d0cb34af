"""The tables of a probe sweep (`ner.layer_analysis.probe_sweep`): probe.csv and probe.md, each row
with its dev (and test) F1 over seeds and its cost: the encoder layers its features need."""

from __future__ import annotations

from collections.abc import Sequence

from ner.evaluation.spread import cell


def best_layer(rows: Sequence[dict]) -> int:
    """The hidden state whose probe has the best mean dev F1."""
    return max((r for r in rows if r["layer"] is not None), key=lambda r: r["dev"][0])["layer"]


def csv_rows(rows: Sequence[dict]) -> list[list]:
    """probe.csv: a header, then one line a row (F1 in points; test columns only if scored)."""
    test = all("test" in r for r in rows)
    header = ["row", "layer", "layers_computed", "dev_f1_mean", "dev_f1_std"]
    header += ["test_f1_mean", "test_f1_std"] if test else []
    lines = [header + ["seeds", "best_epochs", "epochs_run"]]
    for r in rows:
        line = [r["name"], "" if r["layer"] is None else r["layer"], r["cost"]]
        line += [*map(_round, r["dev"])] + ([*map(_round, r["test"])] if test else [])
        runs = r["runs"]
        line += [" ".join(str(run[k]) for run in runs) for k in ("seed", "epoch", "epochs")]
        lines.append(line)
    return lines


def _round(value: float | None) -> float | str:
    return "" if value is None else round(value, 4)


def markdown(rows: Sequence[dict], title: str) -> str:
    """probe.md: the table (mean ± std over seeds, points) and the mean scalar-mix weights."""
    test = all("test" in r for r in rows)
    seeds, deepest = len(rows[0]["runs"]), max(r["cost"] for r in rows)
    lines = [f"# Probing {title}", "", f"Entity F1 (mean ± std over {seeds} seeds); cost: the "
             f"encoder layers computed, of {deepest}; epochs: run, until dev F1 stopped "
             "improving.", ""]  # fmt: skip
    lines += ["| hidden state | cost | dev F1 |" + (" test F1 |" if test else "") + " epochs |"]
    lines += ["|---|---:|---:|" + ("---:|" if test else "") + "---|"]
    for r in rows:
        name = "0 (embeddings)" if r["layer"] == 0 else r["name"]
        epochs = " ".join(str(run["epochs"]) for run in r["runs"])
        cost = f"{r['cost']} ({r['cost'] / deepest:.0%})" if deepest else "0"
        scores = f"{cell(r['dev'])} |" + (f" {cell(r['test'])} |" if test else "")
        lines.append(f"| {name} | {cost} | {scores} {epochs} |")
    for r in rows:
        if "weights" in r:
            weights = ", ".join(f"{k}: {w:.3f}" for k, w in enumerate(r["weights"]))
            lines += [
                "",
                f"Scalar-mix weights (softmax, mean over seeds) by hidden state: {weights}",
            ]
    lines += ["", f"Best single hidden state on dev: {best_layer(rows)}"]
    return "\n".join(lines) + "\n"
