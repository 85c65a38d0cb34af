"""Results over seeds: mean ± sample std of F1, overall and per type, as a table. No torch."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

TYPES_KEY = "f1_"


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value: one seed has no spread,
    and a 0.00 would read as a perfectly stable result)."""
    values = [float(v) for v in values]
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def types_of(report: Mapping[str, Any]) -> list[str]:
    """The entity types of an `entity_scores` report."""
    return sorted(k[len(TYPES_KEY) :] for k in report if k.startswith(TYPES_KEY))


def summary(runs: Sequence[Mapping[str, Any]], splits: Sequence[str] = ("dev", "test")) -> dict:
    """Per split present in the runs: mean and std of micro F1 and of each type's F1 (points)."""
    out: dict[str, Any] = {"seeds": [r["seed"] for r in runs]}
    for split in splits:
        reports = [r[split] for r in runs if split in r]
        if len(reports) != len(runs):
            continue
        keys = ["f1"] + [f"{TYPES_KEY}{t}" for t in types_of(reports[0])]
        out[split] = {k: mean_std([100 * rep[k] for rep in reports]) for k in keys}
    if all("fit_s" in r for r in runs):
        out["fit_s"] = mean_std([r["fit_s"] for r in runs])
    return out


def cell(pair: tuple[float, float | None], digits: int = 2) -> str:
    """`mean ± std` as printed in the tables; `± n/a` where there is one value."""
    spread = "n/a" if pair[1] is None else f"{pair[1]:.{digits}f}"
    return f"{pair[0]:.{digits}f} ± {spread}"


def markdown(name: str, runs: Sequence[Mapping[str, Any]]) -> str:
    """One row a seed, then the mean ± std row: F1 and per-type F1 of each split, fit time."""
    stats = summary(runs)
    splits = [s for s in ("dev", "test") if s in stats]
    types = types_of(runs[0][splits[0]]) if splits else []
    headers = ["run", "seed"]
    for split in splits:
        headers += [f"{split} F1"] + [f"{split} {t}" for t in types]
    headers += ["fit s"]
    rows = []
    for run in runs:
        cells = [name, str(run["seed"])]
        for split in splits:
            report = run[split]
            cells += [f"{100 * report['f1']:.2f}"]
            cells += [f"{100 * report[TYPES_KEY + t]:.2f}" for t in types]
        cells.append(f"{run['fit_s']:.0f}" if "fit_s" in run else "")
        rows.append(cells)
    mean = [name, "mean ± std"]
    for split in splits:
        mean += [cell(stats[split]["f1"])]
        mean += [cell(stats[split][TYPES_KEY + t]) for t in types]
    if "fit_s" in stats:
        mean.append(cell(stats["fit_s"], digits=0))
    else:
        mean.append("")
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in [*rows, mean]]
    return "\n".join(lines)
