"""What `ner fit` and `ner test` say when they finish: the final line of a fit (best dev F1 and
where `best.ckpt` is), and the report of a test run (per-type scores, error analysis, report
files), also for partial runs (`--trainer.limit_test_batches`, `fast_dev_run`), which report on
the sentences they scored and say so."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pytorch_lightning.callbacks import ModelCheckpoint

from ner.corpus.outputs import write_test_outputs
from ner.evaluation.error_analysis import analyse, format_analysis, training_entities
from ner.evaluation.metrics import format_report
from ner.model.resume import LastCheckpoint

TEST_FORMATS = ("text", "json")


def shown(path: str) -> str:
    """A path as the user gave it: relative to the working folder when it lies inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def saved(trainer) -> tuple[ModelCheckpoint | None, str]:
    """The callback of the best checkpoint (the first monitoring one that saved), if any, and
    the path of `last.ckpt` ("" if none was written)."""
    callbacks = [c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)]
    last = next((c.best_model_path for c in callbacks if isinstance(c, LastCheckpoint)), "")
    monitored = [c for c in callbacks if not isinstance(c, LastCheckpoint) and c.monitor]
    return next((c for c in monitored if c.best_model_path), None), last


def fit_line(trainer) -> str:
    """One line: the best dev F1 and its `best.ckpt`, and the `last.ckpt` to resume from."""
    if trainer.fast_dev_run:
        return "fit: fast_dev_run: a batch or so of each loop, nothing saved"
    best, last = saved(trainer)
    resume = f"; last state: {shown(last)}" if last else ""
    if best is None or best.best_model_score is None:
        return f"fit: no validation ran, so no best checkpoint{resume or '; nothing saved'}"
    score = float(best.best_model_score)
    return f"fit: best {best.monitor} {100 * score:.2f}: {shown(best.best_model_path)}{resume}"


def report_dir(output: str | None, ckpt_path: str | None, trainer) -> Path:
    """Where `ner test` writes its report: `--output`, else beside the checkpoint, else logs."""
    if output:
        return Path(output)
    if ckpt_path:
        return Path(ckpt_path).parent
    return Path(trainer.log_dir or ".")


def seen_entities(model, data) -> set[str] | None:
    """The training entities: the checkpoint's, else those of `--data.train_file`, if any."""
    if model.train_entities is not None:
        return set(model.train_entities)
    if not data.files.get("train"):
        return None  # e.g. a checkpoint written before entities were recorded
    return training_entities((s.words, s.tags) for s in data.corpus("train").sentences)


def coverage(scored: int, total: int) -> dict[str, Any]:
    """How much of the split a run scored (a limited run scores part of it)."""
    return {"scored_sentences": scored, "sentences": total, "partial": scored < total}


def coverage_line(cover: dict[str, Any]) -> str:
    """A partial run says what it covered."""
    return (
        f"partial run: scored {cover['scored_sentences']:,} of {cover['sentences']:,} "
        "sentences (a --trainer.limit_* option or fast_dev_run); the scores cover those only"
    )


def test_report(cli, ckpt_path: str | None, output: str | None, fmt: str) -> dict[str, Any]:
    """Score what the test run tagged, print it (`fmt`: text tables or one JSON object) and
    write the report and the conlleval predictions file; the payload written."""
    model, data = cli.model, cli.datamodule
    sentences = data.sentences("test")
    done = sorted(model.test_eval.predictions)  # all of them, unless the run was limited
    scored = [sentences[i] for i in done]
    predictions = [model.test_eval.predictions[i] for i in done]
    analysis = analyse([w for w, _ in scored], [g for _, g in scored], predictions,
                       seen_entities(model, data), model.metric_mode)  # fmt: skip
    test_file = data.files["test"] or f"{data.hub_name}[test]"
    payload = {"checkpoint": ckpt_path, "test_file": test_file, "metrics": model.test_report,
               **coverage(len(done), len(sentences)), "analysis": analysis}  # fmt: skip
    path = write_test_outputs(
        report_dir(output, ckpt_path, cli.trainer),
        Path(ckpt_path).stem if ckpt_path else "model",
        payload,
        scored,
        predictions,
        data.scheme_of("test"),
    )
    if fmt == "json":
        print(json.dumps({**payload, "report": str(path)}))
        return payload
    print(format_report(model.test_report, model.labels))
    print(format_analysis(analysis))
    if payload["partial"]:
        print(coverage_line(payload))
    print(f"report: {path}")
    return payload
