"""The first hour as a user: limited and partial runs report on what they saw, stdout carries only
data and reports, `--help` says what each command does, checkpoints are slim, and the smaller
promises of the README hold."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
from helpers import ROOT, run_ner

from ner.cli.main import COMMANDS
from ner.inference.backends import ExportedTagger
from ner.model.tagger import load_tagger

TINY_TEXT = "John Smith visited Paris today .\n\nthe bank said Mary met Reuters\n   \nAcme Corp\n"


def jsonl(text: str) -> list[dict]:
    """stdout of `ner tag` / `ner predict`: one JSON record a line, nothing else."""
    records = [json.loads(line) for line in text.splitlines()]
    assert all(set(r) == {"line", "text", "entities"} for r in records), text
    return records


# Every line `ner test` may print, as a pattern: the per-type table, the analysis and the path.
REPORT_LINES = [
    r"\s+precision\s+recall\s+f1-score\s+support",
    r"\s*(\w+|micro avg)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\d+",
    r"\s*macro f1\s+[\d.]+\s+\d+",
    r"\s*(entity length|seen in training)\s+precision\s+recall\s+f1-score\s+support",
    r"\s+(\d\+?|seen|unseen)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\d+",
    r"type confusions \(span right, type wrong\): gold -> predicted",
    r"  \w+: (\w+ \d+(, )?)+",
    r"boundary errors \(type right, span wrong\): .*",
    r"micro F1 95% bootstrap interval \(1000 resamples of the sentences\): \[[\d.]+, [\d.]+\]",
    r"partial run: scored [\d,]+ of [\d,]+ sentences .*",
    r"report: .*\.test-report\.json",
]


def best_score(last: dict) -> float:
    """The best `val/f1` the best-checkpoint callback recorded in a `last.ckpt`."""
    return float(
        next(
            v["best_model_score"]
            for k, v in last["callbacks"].items()
            if k.startswith("ModelCheckpoint") and "'monitor': 'val/f1'" in k
        )
    )


def report(text: str) -> list[str]:
    """stdout of `ner test`: every line one of the report's, nothing else."""
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        assert any(re.fullmatch(p, line) for p in REPORT_LINES), f"not a report line: {line!r}"
    return lines


@pytest.fixture
def inputs(tmp_path, tiny_corpus_dir):
    text = tmp_path / "in.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    return {"text": text, "conll": tiny_corpus_dir / "test.txt"}


@pytest.mark.parametrize(
    "limit",
    [
        ["--trainer.limit_test_batches", "2"],
        ["--trainer.limit_test_batches", "0.25"],
        ["--trainer.fast_dev_run", "true"],
    ],
)
def test_a_limited_test_run_reports_on_what_it_scored(trained, inputs, tmp_path, capsys, limit):
    """Regression: a limited `ner test` ended in `KeyError: 0` (it indexed every sentence)."""
    ckpt = str(trained["ckpt"] / "best.ckpt")
    code, out, err = run_ner(
        [
            "test",
            "--ckpt_path",
            ckpt,
            "--data.test_file",
            str(inputs["conll"]),
            "--data.batch_size",
            "4",
            "--output",
            str(tmp_path / "r"),
            "--format",
            "json",
            *limit,
        ],
        capsys,
    )
    assert code == 0, err
    payload = json.loads(out)
    scored = {"2": 8, "0.25": 4, "true": 4}[limit[1]]  # 4 sentences a batch, 20 in all
    assert (payload["scored_sentences"], payload["sentences"]) == (scored, 20)
    assert payload["partial"] is True
    blocks = (tmp_path / "r" / "best.test-predictions.txt").read_text().strip().split("\n\n")
    assert len(blocks) == scored
    gold = sum(line.split()[1].startswith("B-") for b in blocks for line in b.splitlines())
    assert sum(payload["metrics"][f"support_{t}"] for t in ("LOC", "ORG", "PER")) == gold


def test_the_text_report_says_a_run_was_partial(trained, inputs, tmp_path, capsys):
    ckpt = str(trained["ckpt"] / "best.ckpt")
    code, out, err = run_ner(
        [
            "test",
            "--ckpt_path",
            ckpt,
            "--data.test_file",
            str(inputs["conll"]),
            "--data.batch_size",
            "4",
            "--output",
            str(tmp_path),
            "--trainer.limit_test_batches",
            "1",
        ],
        capsys,
    )
    assert code == 0, err
    assert "partial run: scored 4 of 20 sentences" in "\n".join(report(out))


@pytest.mark.parametrize(
    "limit", [["--trainer.limit_predict_batches", "1"], ["--trainer.fast_dev_run", "true"]]
)
def test_a_limited_predict_run_writes_what_it_tagged(trained, inputs, capsys, limit):
    """Regression: `ner predict --trainer.limit_predict_batches 2` ended in `KeyError: 0`."""
    ckpt = str(trained["ckpt"] / "best.ckpt")
    code, out, err = run_ner(
        [
            "predict",
            "--ckpt_path",
            ckpt,
            "--data.predict_file",
            str(inputs["text"]),
            "--data.batch_size",
            "2",
            *limit,
        ],
        capsys,
    )
    assert code == 0, err
    records = jsonl(out)
    assert len(records) == 2 and "partial run: tagged 2 of 5 passages" in err
    full = jsonl(run_ner(["tag", ckpt, str(inputs["text"])], capsys)[1])
    by_line = {r["line"]: r for r in full}
    assert all(r == by_line[r["line"]] for r in records)  # the same records as a full run's


def test_a_fit_without_validation_keeps_last_and_says_so(tiny_model_dir, tiny_corpus_dir, capsys):
    """Regression: `--trainer.limit_val_batches 0` failed on the missing `val/f1` of the best
    checkpoint and of early stopping."""
    argv = [
        "fit",
        "-c",
        str(ROOT / "configs" / "trainer.yaml"),
        "--model.encoder",
        str(tiny_model_dir),
        "--data.data_dir",
        str(tiny_corpus_dir),
        "--trainer.max_steps",
        "2",
        "--trainer.limit_val_batches",
        "0",
        "--run",
        "noval",
    ]
    code, out, err = run_ner(argv, capsys)
    assert code == 0, err
    assert out.strip().splitlines()[-1] == (
        "fit: no validation ran, so no best checkpoint; last state: "
        f"{'checkpoints/noval/last.ckpt'}"
    )
    assert "no validation (limit_val_batches 0)" in err


def test_a_fit_stopped_mid_epoch_by_max_steps_ends_cleanly(tiny_model_dir, tiny_corpus_dir, capsys):
    """Regression: `--trainer.max_steps 1` with several batches an epoch stopped before any
    validation, and early stopping, checked at the training epoch's end, raised on the missing
    `val/f1`."""
    argv = ["fit", "-c", str(ROOT / "configs" / "trainer.yaml"), "--model.encoder",
            str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir), "--data.batch_size",
            "4", "--trainer.max_steps", "1", "--run", "onestep"]  # fmt: skip
    code, out, err = run_ner(argv, capsys)
    assert code == 0, err
    assert out.strip().splitlines()[-1] == (
        "fit: no validation ran, so no best checkpoint; last state: checkpoints/onestep/last.ckpt"
    )
    assert torch.load("checkpoints/onestep/last.ckpt", weights_only=True)["global_step"] == 1


def test_fit_ends_with_one_line_naming_the_best_checkpoint(tiny_model_dir, tiny_corpus_dir, capsys):
    argv = [
        "fit",
        "-c",
        str(ROOT / "configs" / "trainer.yaml"),
        "--model.encoder",
        str(tiny_model_dir),
        "--data.data_dir",
        str(tiny_corpus_dir),
        "--trainer.max_epochs",
        "2",
        "--run",
        "tiny",
    ]
    code, out, err = run_ner(argv, capsys)
    assert code == 0, err
    line = out.strip().splitlines()
    assert len(line) == 1, out  # stdout holds the report line only: no bar, no logs
    match = re.fullmatch(r"fit: best val/f1 ([\d.]+): (\S+); last state: (\S+)", line[0])
    assert match and match[2] == "checkpoints/tiny/best.ckpt"
    assert match[3] == "checkpoints/tiny/last.ckpt"
    last = torch.load(match[3], weights_only=True)
    recorded = best_score(last)
    assert float(match[1]) == pytest.approx(100 * float(recorded), abs=0.005)
    assert "v_num" not in err  # the bar shows no logger version


def test_best_is_slim_and_last_resumable(trained, tiny_corpus_dir, tmp_path, capsys):
    """best.ckpt is what users load and ship: weights and the `ner` section, no optimizer
    state; last.ckpt keeps what resuming needs. Its dev F1 is the one the fit recorded."""
    best = torch.load(trained["ckpt"] / "best.ckpt", weights_only=True)
    last = torch.load(trained["ckpt"] / "last.ckpt", weights_only=True)
    assert "optimizer_states" not in best and "lr_schedulers" not in best
    assert last["optimizer_states"] and last["lr_schedulers"] and "ResumeState" not in best
    assert best["ner"]["labels"] == last["ner"]["labels"] and best["ner"]["tokenizer_files"]
    size = (trained["ckpt"] / "best.ckpt").stat().st_size
    weights = sum(t.numel() * t.element_size() for t in best["state_dict"].values())
    assert size < 1.5 * weights + 2**20  # the weights, the section, no twice-as-big Adam state
    recorded = best_score(last)
    code, out, err = run_ner(
        [
            "test",
            "--ckpt_path",
            str(trained["ckpt"] / "best.ckpt"),
            "--data.test_file",
            str(tiny_corpus_dir / "dev.txt"),
            "--output",
            str(tmp_path),
            "--format",
            "json",
        ],
        capsys,
    )
    assert code == 0, err
    assert json.loads(out)["metrics"]["f1"] == pytest.approx(float(recorded))


def test_stdout_of_every_data_command_parses(trained, inputs, tmp_path, capsys):
    """stdout carries only data and reports (pipe it into jq); bars and logs go to stderr."""
    ckpt = str(trained["ckpt"] / "best.ckpt")
    bar = ["--trainer.enable_progress_bar", "true"]  # a bar, to see where it goes
    code, out, err = run_ner(
        ["predict", "--ckpt_path", ckpt, "--data.predict_file", str(inputs["text"]), *bar], capsys
    )
    assert code == 0 and len(jsonl(out)) == 5 and "Predicting" in err, err
    code, out, err = run_ner(["tag", ckpt, str(inputs["text"])], capsys)
    assert code == 0 and len(jsonl(out)) == 5, err
    code, out, err = run_ner(
        [
            "test",
            "--ckpt_path",
            ckpt,
            "--data.test_file",
            str(inputs["conll"]),
            "--output",
            str(tmp_path),
            *bar,
        ],
        capsys,
    )
    assert code == 0 and "Testing" in err, err
    assert report(out)[-1] == f"report: {tmp_path / 'best.test-report.json'}"
    code, out, err = run_ner(
        [
            "test",
            "--ckpt_path",
            ckpt,
            "--data.test_file",
            str(inputs["conll"]),
            "--output",
            str(tmp_path),
            "--format",
            "json",
            *bar,
        ],
        capsys,
    )
    assert code == 0 and json.loads(out)["metrics"]["f1"] > 0.9, err
    code, out, err = run_ner(["inspect", "--json", str(inputs["conll"])], capsys)
    assert code == 0 and json.loads(out)["sentences"] == 20, err


def test_ner_test_and_predict_keep_stdout_clean_in_a_real_process(trained, inputs, tmp_path):
    """The same through the console script, where Lightning picks its default progress bar
    (rich when it is installed: it drew on stdout)."""
    ckpt = str(trained["ckpt"] / "best.ckpt")
    run = [sys.executable, "-m", "ner"]
    predict = subprocess.run(
        [*run, "predict", "--ckpt_path", ckpt, "--data.predict_file", str(inputs["text"])],
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(jsonl(predict.stdout)) == 5
    test = subprocess.run(
        [
            *run,
            "test",
            "--ckpt_path",
            ckpt,
            "--data.test_file",
            str(inputs["conll"]),
            "--output",
            str(tmp_path),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(test.stdout)["sentences"] == 20


def test_help_lists_every_command_with_its_own_line(capsys):
    code, out, _ = run_ner(["--help"], capsys)
    assert code == 0
    listed = re.findall(r"^  ([\w-]+)\s+(.+)$", out, flags=re.M)
    assert listed == [(name, text) for name, (_, text) in COMMANDS.items()]
    assert len(listed) >= 11
    code, _, err = run_ner(["tset"], capsys)
    assert code == 2 and err.strip() == (
        f"error: unknown command 'tset' (did you mean test?); one of {', '.join(COMMANDS)}"
    )


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_help_says_what_the_command_does(command, capsys):
    """Regression: `ner test --help` said "Runs the full optimization routine."; the argparse
    commands' descriptions stopped mid-sentence."""
    code, out, _ = run_ner([command, "--help"], capsys)
    assert code == 0
    assert " ".join(COMMANDS[command][1].split()) in " ".join(out.split())
    if command in ("validate", "test", "predict"):  # the docstring of fit, which fit may keep
        assert "Runs the full optimization routine" not in out


def test_the_output_option_says_what_it_is_for_each_command(capsys):
    out = " ".join(run_ner(["test", "--help"], capsys)[1].split())
    assert "--output OUTPUT the folder of the report files" in out
    out = " ".join(run_ner(["predict", "--help"], capsys)[1].split())
    assert "--output OUTPUT the predictions file (default: stdout)" in out
    assert "--output" not in run_ner(["fit", "--help"], capsys)[1]


def test_embed_takes_negative_layers_as_the_readme_writes_them(trained, inputs, tmp_path, capsys):
    """Regression: `--layers -4,-3,-2,-1` was an argparse error (only `--layers=-4,...`)."""
    ckpt = str(trained["ckpt"] / "best.ckpt")
    code, out, err = run_ner(
        [
            "embed",
            str(inputs["conll"]),
            "--ckpt_path",
            ckpt,
            "--layers",
            "-2,-1",
            "--output",
            str(tmp_path / "e"),
        ],
        capsys,
    )
    assert code == 0, err
    meta = json.loads((tmp_path / "e" / "meta.json").read_text())
    assert meta["layers"] == [2, 3] and out.startswith("embeddings: ")


def test_words_jsonl_names_each_word_by_its_own_line(trained, inputs, tmp_path, capsys):
    ckpt = str(trained["ckpt"] / "best.ckpt")
    code, _, err = run_ner(
        ["embed", str(inputs["conll"]), "--ckpt_path", ckpt, "--output", str(tmp_path / "e")],
        capsys,
    )
    assert code == 0, err
    lines = inputs["conll"].read_text().splitlines()
    records = [json.loads(r) for r in (tmp_path / "e" / "words.jsonl").read_text().splitlines()]
    for record in records:
        assert lines[record["line"] - 1].split()[0] == record["text"]
        first, last = record["sentence_lines"]
        assert first <= record["line"] <= last and (last == len(lines) or not lines[last].strip())


def test_conll_output_of_text_keeps_one_block_a_line(trained, inputs, capsys):
    """Regression: blank input lines wrote no block, so block n was no longer line n."""
    ckpt = str(trained["ckpt"] / "best.ckpt")
    code, out, err = run_ner(["tag", ckpt, str(inputs["text"]), "--format", "conll"], capsys)
    assert code == 0, err
    blocks, current = [], []
    for line in out.split("\n")[:-1]:  # a blank line ends each block, an empty one too
        if line:
            current.append(line.split()[0])
        else:
            blocks.append(current)
            current = []
    assert blocks == [line.split() for line in TINY_TEXT.splitlines()]


def test_an_export_folder_predicts_like_its_checkpoint(trained, tmp_path, capsys):
    ckpt = str(trained["ckpt"] / "best.ckpt")
    assert run_ner(["export", ckpt, str(tmp_path / "exp")], capsys)[0] == 0
    texts = ["John Smith visited Paris today .", "the bank said Mary met Reuters"]
    got = ExportedTagger(tmp_path / "exp").predict(texts, bf16=False)
    want = load_tagger(ckpt).predict(texts, bf16=False)
    assert [[(e["start"], e["end"], e["label"]) for e in s] for s in got] == [
        [(e["start"], e["end"], e["label"]) for e in s] for s in want
    ]


def test_an_encoder_that_cannot_be_loaded_offline_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no hub, as on a machine without network
    text = tmp_path / "in.txt"
    text.write_text("John met Mary\n")
    code, out, err = run_ner(
        ["embed", str(text), "--encoder", "bert-base-cased", "--output", str(tmp_path / "e")],
        capsys,
    )
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("error: encoder: cannot load 'bert-base-cased': not a local folder")
    assert not (tmp_path / "e").exists()


def test_loading_a_checkpoint_in_python_prints_nothing(trained):
    code = (
        f"from ner import NERTagger\nt = NERTagger.load_from_checkpoint("
        f"{str(trained['ckpt'] / 'best.ckpt')!r})\nt.predict(['John met Mary'])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stderr


def test_resuming_with_other_options_is_one_line(tiny_model_dir, tiny_corpus_dir, capsys):
    """Regression: `--ckpt_path last` over a run trained with another combiner ended in
    Lightning's `load_state_dict` traceback."""
    base = ["fit", "-c", str(ROOT / "configs" / "trainer.yaml"), "--model.encoder",
            str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir), "--trainer.max_steps",
            "1", "--run", "mixed"]  # fmt: skip
    code, _, err = run_ner([*base, "--model.combiner", "ner.modules.combiners.ScalarMix"], capsys)
    assert code == 0, err
    code, out, err = run_ner([*base, "--ckpt_path", "last"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: checkpoints/mixed/last.ckpt: holds another model than")
    assert "'combiner.gamma' is not in this model" in err
