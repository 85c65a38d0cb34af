"""Two processes (DDP over gloo on CPU): fit validates with the global F1 and saves each
checkpoint once; `ner test` and `ner predict` write complete, ordered outputs equal to the
single-process run on the same checkpoint. Odd-sized data, so ranks get unequal shares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import ROOT, tiny_sentences, write_tiny_corpus

DDP = ["--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu"]


def ner(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "ner.cli.main", *args], capture_output=True, text=True, env=env,
        cwd=cwd, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("ddp")
    corpus = tmp / "corpus"
    corpus.mkdir()
    write_tiny_corpus(corpus / "train.txt", tiny_sentences(23, seed=5))
    write_tiny_corpus(corpus / "dev.txt", tiny_sentences(13, seed=6))
    write_tiny_corpus(corpus / "test.txt", tiny_sentences(17, seed=7))
    config = tmp / "fit.yaml"  # trainer.yaml without early stopping: a fixed 30 epochs
    config.write_text(
        (ROOT / "configs" / "trainer.yaml").read_text().replace("patience: 3", "patience: 100")
    )
    ner(tmp, "fit", "-c", str(config), "--model.encoder", str(tiny_model_dir),
        "--data.data_dir", str(corpus), "--data.batch_size", "4", "--trainer.max_epochs", "30",
        "--model.encoder_lr", "3e-3", "--model.head_lr", "1e-2", "--model.warmup_ratio", "0.0",
        "--trainer.precision", "32-true", "--run", "ddp", "--trainer.enable_progress_bar",
        "false", *DDP)  # fmt: skip
    return tmp, corpus


def test_ddp_fit_saves_each_checkpoint_once(ddp_run):
    tmp, _ = ddp_run
    assert sorted(p.name for p in (tmp / "checkpoints" / "ddp").iterdir()) == [
        "README.md", "best.ckpt", "last.ckpt"
    ]  # fmt: skip
    metrics = (tmp / "runs" / "ddp" / "version_0" / "metrics.csv").read_text().splitlines()
    assert len([m for m in metrics[1:] if m.split(",")[metrics[0].split(",").index("val/f1")]])


def test_ddp_validation_f1_is_the_global_one(ddp_run):
    """best.ckpt's score, computed by 2 ranks, equals one process validating those weights."""
    tmp, corpus = ddp_run
    best = tmp / "checkpoints" / "ddp" / "best.ckpt"
    # the score ModelCheckpoint recorded travels in last.ckpt (best.ckpt holds the model only)
    state = torch.load(best.parent / "last.ckpt", weights_only=False)
    score = next(
        v["best_model_score"]
        for k, v in state["callbacks"].items()
        if k.startswith("ModelCheckpoint") and "'monitor': 'val/f1'" in k
    )
    out = ner(tmp, "validate", "--ckpt_path", str(best), "--data.val_file",
              str(corpus / "dev.txt"), "--trainer.enable_progress_bar", "false")  # fmt: skip
    table = [[c.strip() for c in line.split("│") if c.strip()] for line in out.stdout.splitlines()]
    single = next(float(row[1]) for row in table if row[:1] == ["val/f1"])
    assert single > 0.3  # a model that learned something, so agreement means something
    assert float(score) == pytest.approx(single, abs=1e-6)


def test_ddp_test_and_predict_equal_single_process(ddp_run):
    tmp, corpus = ddp_run
    best = str(tmp / "checkpoints" / "ddp" / "best.ckpt")
    for name, extra in (("single", []), ("ddp", DDP)):
        ner(
            tmp,
            "test",
            "--ckpt_path",
            best,
            "--data.test_file",
            str(corpus / "test.txt"),
            "--output",
            str(tmp / name),
            "--trainer.enable_progress_bar",
            "false",
            *extra,
        )
        ner(tmp, "predict", "--ckpt_path", best, "--data.predict_file", str(corpus / "test.txt"),
            "--data.predict_format", "conll",
            "--output", str(tmp / f"{name}.jsonl"), "--trainer.enable_progress_bar", "false",
            *extra)  # fmt: skip
    single = json.loads((tmp / "single" / "best.test-report.json").read_text())["metrics"]
    ddp = json.loads((tmp / "ddp" / "best.test-report.json").read_text())["metrics"]
    assert ddp == single  # every figure, exactly
    predictions = (tmp / "single" / "best.test-predictions.txt").read_text()
    assert (tmp / "ddp" / "best.test-predictions.txt").read_text() == predictions
    assert predictions.count("\n\n") == 17  # every sentence, in input order
    records = (tmp / "single.jsonl").read_text()
    assert (tmp / "ddp.jsonl").read_text() == records
    assert [json.loads(r)["line"] for r in records.splitlines()] == sorted(
        json.loads(r)["line"] for r in records.splitlines()
    )
    assert len(records.splitlines()) == 17


def test_ddp_consistency_decodes_whole_documents_as_one_process_does(ddp_run):
    """With document-level consistency each rank holds part of every document until the epoch
    ends; the documents are decoded whole, so the figures and outputs equal one process's."""
    tmp, _ = ddp_run
    best = str(tmp / "checkpoints" / "ddp" / "best.ckpt")
    named = [
        [(w.capitalize() if t != "O" else w, t) for w, t in sentence]
        for sentence in tiny_sentences(17, seed=7)
    ]  # capitalised names: the words consistency reads
    test_file = str(write_tiny_corpus(tmp / "named.txt", named, docs=3))
    for name, extra in (("single-c", []), ("ddp-c", DDP)):
        ner(tmp, "test", "--ckpt_path", best, "--data.test_file", test_file, "--output",
            str(tmp / name), "--model.consistency", "3", "--trainer.enable_progress_bar",
            "false", *extra)  # fmt: skip
        ner(tmp, "predict", "--ckpt_path", best, "--data.predict_file", test_file,
            "--data.predict_format", "conll", "--model.consistency", "3", "--output",
            str(tmp / f"{name}.jsonl"), "--trainer.enable_progress_bar", "false",
            *extra)  # fmt: skip
    single = json.loads((tmp / "single-c" / "best.test-report.json").read_text())["metrics"]
    assert json.loads((tmp / "ddp-c" / "best.test-report.json").read_text())["metrics"] == single
    predictions = (tmp / "single-c" / "best.test-predictions.txt").read_text()
    assert (tmp / "ddp-c" / "best.test-predictions.txt").read_text() == predictions
    assert predictions.count("\n\n") == 17
    records = (tmp / "single-c.jsonl").read_text()
    assert (tmp / "ddp-c.jsonl").read_text() == records
    assert len(records.splitlines()) == 17
