"""The model card file beside a run's checkpoints, `README.md` in the Hugging Face convention: a
YAML header between `---` lines (`library_name: ner`, `model-index` with the results) and a
Markdown body of `## ` sections. `ner fit` writes it (`ner.cli.fit_card`); `ner test` of the
checkpoint it describes adds (or replaces) the "Test scores" section and the test F1 in
`model-index`, and keeps the rest. Written whole (`atomic_write`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

from ner.cli.reports import coverage_line
from ner.utils.errors import NERError
from ner.utils.files import atomic_write

CARD = "README.md"
DEV, TEST = "## Dev scores", "## Test scores"
# the body's line naming the checkpoint the card describes: `ner test` of another (`last.ckpt`
# beside `best.ckpt`) leaves the card alone
SUBJECT = re.compile(r"^Checkpoint: `([^`]+)`", re.MULTILINE)


def source(data: Any, split_file: str) -> str | None:
    """Where a split comes from, as the config gives it: its file, else the data folder, else
    the hub dataset."""
    return data.get(split_file) or data.get("data_dir") or data.get("hub_name")


def result(split: str, dataset: str | None, f1: float, name: str) -> dict[str, Any]:
    """One `model-index` result: the entity F1 on a split (`validation`, `test`)."""
    return {
        "task": {"type": "token-classification", "name": "Named-entity recognition"},
        "dataset": {"name": dataset, "type": dataset, "split": split},
        "metrics": [{"type": "f1", "value": f1, "name": name}],
    }


def set_result(header: dict[str, Any], name: str, new: dict[str, Any]) -> None:
    """Put `new` into the header's `model-index`, replacing the result of its split."""
    index = header.setdefault("model-index", [{"name": name, "results": []}])
    split = new["dataset"]["split"]
    kept = [r for r in index[0]["results"] if r.get("dataset", {}).get("split") != split]
    index[0]["results"] = [*kept, new]


def scores_table(report: dict[str, float]) -> str:
    """Per-type precision, recall, F1 and support, the micro average and the macro F1."""
    types = sorted(k[3:] for k in report if k.startswith("f1_"))
    rows = ["| type | precision | recall | F1 | support |", "|---|---:|---:|---:|---:|"]
    for t in types:
        p, r, f = (report[f"{m}_{t}"] for m in ("precision", "recall", "f1"))
        rows.append(f"| {t} | {p:.4f} | {r:.4f} | {f:.4f} | {int(report[f'support_{t}']):,} |")
    support = sum(int(report[f"support_{t}"]) for t in types)
    p, r, f = report["precision"], report["recall"], report["f1"]
    rows.append(f"| micro avg | {p:.4f} | {r:.4f} | {f:.4f} | {support:,} |")
    rows.append(f"| macro F1 | | | {report['macro_f1']:.4f} | {support:,} |")
    return "\n".join(rows) + "\n"


def write_card(path: Path, header: dict[str, Any], body: str) -> None:
    """The card at `path`, whole or not at all."""
    front = yaml.safe_dump(header, sort_keys=False, allow_unicode=True, width=100)
    with atomic_write(path) as out:
        out.write(f"---\n{front}---\n\n{body.rstrip()}\n")


def read_card(path: Path) -> tuple[dict[str, Any], str] | None:
    """A card's header and body; None when the file is no card of `ner` (no YAML header, or
    another library's): such a README is never rewritten."""
    text = path.read_text(encoding="utf-8")
    end = text.find("\n---\n", 3)
    if not text.startswith("---\n") or end < 0:
        return None
    try:
        header = yaml.safe_load(text[4 : end + 1])
    except yaml.YAMLError:
        return None
    if not isinstance(header, dict) or header.get("library_name") != "ner":
        return None
    return header, text[end + 5 :].lstrip("\n")


def with_section(body: str, heading: str, text: str, after: str) -> str:
    """`body` with the section `heading` replaced by `text`, or, absent, inserted after the
    section `after` (else at the end)."""
    sections = re.split(r"\n(?=## )", body.rstrip() + "\n")
    at = next((i for i, s in enumerate(sections) if s.split("\n", 1)[0] == heading), None)
    if at is not None:
        sections[at] = text
    else:
        found = [i for i, s in enumerate(sections) if s.split("\n", 1)[0] == after]
        sections.insert(found[0] + 1 if found else len(sections), text)
    return "\n".join(s.rstrip("\n") + "\n" for s in sections)


def card_of(model: str | Path) -> Path | None:
    """The model card of a checkpoint (the `README.md` of `ner` beside it that describes it,
    not another checkpoint of its folder) or of a folder (`ner export`'s: its `README.md`);
    None if it has none."""
    path = Path(model)
    card = path / CARD if path.is_dir() else path.parent / CARD
    found = read_card(card) if card.is_file() else None
    if found is None or path.is_dir():
        return None if found is None else card
    subject = SUBJECT.search(found[1])
    return card if subject is not None and subject.group(1) == path.name else None


def add_test_scores(ckpt_path: str | None, payload: dict[str, Any], config: Any) -> Path | None:
    """After `ner test` (global rank 0): the test scores into the checkpoint's card
    (`card_of`); its path, or None if it has none. A partial run
    (`--trainer.limit_test_batches`) scored part of the split: the card is kept as it was."""
    card = card_of(ckpt_path) if ckpt_path else None
    if card is None:
        return None
    if payload["partial"]:
        note(f"{card}: kept as it was ({coverage_line(payload)})")
        return None
    header, body = read_card(card)
    run = Path(ckpt_path).parent.name
    set_result(header, run, result("test", source(config.data, "test_file"),
                                   payload["metrics"]["f1"], "test F1"))  # fmt: skip
    how = f"backend {config.get('backend') or 'torch'}"
    how += f", {config.quantize}" if config.get("quantize") else ""
    mode = config.model.get("metric_mode") or "default"
    section = (
        f"{TEST}\n\n`ner test` of `{Path(ckpt_path).name}` on `{payload['test_file']}` ({how}), "
        f"entities matched in {mode} mode:\n\n{scores_table(payload['metrics'])}"
    )
    try:
        write_card(card, header, with_section(body, TEST, section, after=DEV))
    except NERError as exc:  # the report is written: a card that cannot follow is a note
        note(f"the model card keeps its old test scores: {exc}")
        return None
    return card


def note(message: str) -> None:
    """A note on stderr: stdout carries `ner test`'s report only."""
    print(f"note: {message}", file=sys.stderr)
