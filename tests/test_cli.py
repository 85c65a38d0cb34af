"""The `ner` command end to end on a tiny model: fit, self-contained checkpoints, test, predict,
tag, and one-line errors for bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import ROOT, TAG_LINES, fit_config, one_line_error, run_ner, write_tiny_corpus
from seqeval.metrics import f1_score

from ner.cli.lightning import run_lightning
from ner.model.tagger import load_tagger
from ner.utils.errors import NERError


def test_fit_writes_best_and_last(trained):
    assert (trained["ckpt"] / "best.ckpt").is_file()
    assert (trained["ckpt"] / "last.ckpt").is_file()


def test_checkpoint_loads_offline_elsewhere_with_identical_logits(trained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tagger = load_tagger(trained["ckpt"] / "last.ckpt")
    with torch.inference_mode():
        logits = tagger(trained["batch"])
    # last.ckpt is the state at the end of training (regression: Lightning's save_last=True
    # only rewrites it when val/f1 improves, so it lagged behind).
    assert torch.equal(logits, trained["logits"])


def test_test_from_checkpoint_alone_writes_report(trained, tiny_corpus_dir, capsys):
    ckpt = trained["ckpt"] / "best.ckpt"
    test_file = tiny_corpus_dir / "test.txt"
    code, out, err = run_ner(
        ["test", "--ckpt_path", str(ckpt), "--data.test_file", str(test_file)], capsys
    )
    assert code == 0, err
    assert "MISC" not in out and "PER" in out and "micro" in out
    report = json.loads((trained["ckpt"] / "best.test-report.json").read_text())
    lines = (trained["ckpt"] / "best.test-predictions.txt").read_text().split("\n\n")
    sentences = [[ln.split() for ln in block.splitlines()] for block in lines if block.strip()]
    gold = [[t[1] for t in s] for s in sentences]
    pred = [[t[2] for t in s] for s in sentences]
    assert len(sentences) == 20
    # The reported F1 is the one seqeval (conlleval mode) computes from the written predictions.
    assert report["metrics"]["f1"] == pytest.approx(f1_score(gold, pred))
    assert report["metrics"]["f1"] > 0.9


def test_predict_and_tag_are_two_doors_to_the_same_output(trained, tmp_path, capsys):
    ckpt = trained["ckpt"] / "best.ckpt"
    text = tmp_path / "input.txt"
    text.write_text("John Smith visited Paris today .\nthe bank said Mary met Reuters\n")
    out_predict = tmp_path / "predict.jsonl"
    code, _, err = run_ner(
        ["predict", "--ckpt_path", str(ckpt), "--data.predict_file", str(text),
         "--output", str(out_predict)],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    out_tag = tmp_path / "tag.jsonl"
    code, _, err = run_ner(["tag", str(ckpt), str(text), "--output", str(out_tag)], capsys)
    assert code == 0, err
    assert out_predict.read_text() == out_tag.read_text()
    records = [json.loads(line) for line in out_tag.read_text().splitlines()]
    assert [r["text"] for r in records] == text.read_text().splitlines()
    for record in records:
        for entity in record["entities"]:
            assert record["text"][entity["start"] : entity["end"]] == entity["text"]
            assert 0.0 <= entity["score"] <= 1.0


def test_tag_conll_keeps_columns_and_scheme(trained, tmp_path, capsys):
    conll = tmp_path / "in.conll"
    conll.write_text("-DOCSTART- -X- O\n\nJohn NNP I-PER\nvisited VB O\nParis NNP I-LOC\n\n")
    out = tmp_path / "out.conll"
    code, _, err = run_ner(
        ["tag", str(trained["ckpt"] / "best.ckpt"), str(conll), "--format", "conll",
         "--output", str(out)],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    lines = out.read_text().splitlines()
    assert lines[0].startswith("-DOCSTART-")
    rows = [ln.split() for ln in lines if ln and not ln.startswith("-DOCSTART-")]
    # Columns kept (the old tags too), the prediction appended: `word ... gold pred`, as
    # conlleval reads it; the prediction is in the input's scheme (IOB1: entities open with I-).
    original = [["John", "NNP", "I-PER"], ["visited", "VB", "O"], ["Paris", "NNP", "I-LOC"]]
    assert [r[:3] for r in rows] == original
    assert all(len(r) == 4 and not r[3].startswith("B-") for r in rows)


def whole_file_output(ckpt: Path, path: Path, fmt: str, out: Path) -> str:
    """What `ner tag` wrote before it streamed: the input read whole, then tagged and written."""
    from ner.corpus.inputs import read_inputs
    from ner.corpus.outputs import write_predictions
    from ner.inference.routine import iter_tags

    inp = read_inputs(str(path))
    tagged = iter_tags(load_tagger(ckpt), [p.words for p in inp.passages], doc_ids=inp.doc_ids)
    write_predictions(inp.passages, tagged, fmt, str(out), inp.corpus)
    return out.read_text(encoding="utf-8")


@pytest.mark.parametrize("fmt", ["jsonl", "conll"])
def test_tag_streams_a_text_file_to_the_whole_file_output(
    trained, tmp_path, capsys, monkeypatch, fmt
):
    import ner.corpus.inputs

    ckpt = trained["ckpt"] / "best.ckpt"
    text = tmp_path / "in.txt"
    # a BOM and CRLF line ends, as a Windows editor saves it
    text.write_bytes("\r\n".join(TAG_LINES).encode("utf-8-sig"))
    expected = whole_file_output(ckpt, text, fmt, tmp_path / "whole.out")
    # one record a line; in CoNLL one block a line with words
    assert len(expected.strip("\n").split("\n\n" if fmt == "conll" else "\n")) == (
        7 if fmt == "conll" else 9
    )

    def whole(*args, **kwargs):
        raise AssertionError("ner tag read a text input whole")

    monkeypatch.setattr(ner.corpus.inputs, "read_inputs", whole)
    out = tmp_path / "tag.out"
    code, _, err = run_ner(
        ["tag", str(ckpt), str(text), "--format", fmt, "--output", str(out)], capsys
    )
    assert code == 0, err
    assert out.read_text(encoding="utf-8") == expected


def test_tag_streams_stdin_lazily(trained, tmp_path, capsys, monkeypatch, tag_events):
    ckpt = trained["ckpt"] / "best.ckpt"
    text = tmp_path / "in.txt"
    text.write_text("\n".join(TAG_LINES) + "\n", encoding="utf-8")
    expected = whole_file_output(ckpt, text, "jsonl", tmp_path / "whole.jsonl")
    tag_events.clear()

    def stdin_lines():
        for line in text.read_bytes().splitlines(keepends=True):
            tag_events.append("read")
            yield line

    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=stdin_lines()))
    code, out, err = run_ner(["tag", str(ckpt)], capsys)
    assert code == 0, err
    assert out == expected
    # the first chunk (the 2 peeked lines) was tagged before a third line was read
    assert tag_events.index("tag") == 2
    assert tag_events.count("read") == 9 and tag_events.count("tag") == 9


def test_tag_non_utf8_line_is_a_one_line_error_and_no_output(trained, tmp_path, capsys, tag_events):
    bad = tmp_path / "bad.txt"
    bad.write_bytes("\n".join(TAG_LINES[:7]).encode() + b"\nMary in Par\xe9s\nthe end\n")
    out = tmp_path / "out.jsonl"
    code, _, err = run_ner(["tag", str(trained["ckpt"] / "best.ckpt"), str(bad), "--output",
                            str(out)], capsys)  # fmt: skip
    assert one_line_error(code, err) == f"error: {bad}:8: not UTF-8 text (byte 0xe9)"
    assert "tag" in tag_events  # records were written before the bad line was read...
    assert list(tmp_path.iterdir()) == [bad]  # ...yet no output file, not even a temporary one


def test_tag_detects_conll_on_stdin(trained, tmp_path, capsys, monkeypatch):
    ckpt = str(trained["ckpt"] / "best.ckpt")
    conll = tmp_path / "in.conll"
    conll.write_text("-DOCSTART- -X- O\n\nJohn NNP I-PER\nvisited VB O\n\nParis NNP I-LOC\n")
    code, expected, err = run_ner(["tag", ckpt, str(conll), "--format", "conll"], capsys)
    assert code == 0, err
    monkeypatch.setattr(
        sys, "stdin", SimpleNamespace(buffer=iter(conll.read_bytes().splitlines(True)))
    )
    code, out, err = run_ner(["tag", ckpt, "-", "--format", "conll"], capsys)
    assert code == 0, err
    assert out == expected and out.splitlines()[2].startswith("John NNP I-PER ")


def test_tag_blank_lines_give_records_without_entities(trained, tmp_path, capsys):
    blank = tmp_path / "blank.txt"
    blank.write_bytes(b"\n \n\t\n")
    code, out, err = run_ner(["tag", str(trained["ckpt"] / "best.ckpt"), str(blank)], capsys)
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert records == [
        {"line": 1, "text": "", "entities": []},
        {"line": 2, "text": " ", "entities": []},
        {"line": 3, "text": "\t", "entities": []},
    ]


def test_tag_empty_text_is_a_one_line_error_and_no_output(trained, tmp_path, capsys, monkeypatch):
    ckpt = str(trained["ckpt"] / "best.ckpt")
    content = b""
    empty = tmp_path / "empty.txt"
    empty.write_bytes(content)
    out = tmp_path / "out.jsonl"
    code, _, err = run_ner(["tag", ckpt, str(empty), "--output", str(out)], capsys)
    assert one_line_error(code, err) == f"error: {empty}: no text to tag"
    assert list(tmp_path.iterdir()) == [empty]
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=iter(content.splitlines(True))))
    code, stdout, err = run_ner(["tag", ckpt, "-"], capsys)
    assert one_line_error(code, err) == "error: <stdin>: no text to tag" and stdout == ""


def test_missing_data_file_is_a_one_line_error(trained, tmp_path, capsys):
    ckpt = str(trained["ckpt"] / "best.ckpt")
    code, _, err = run_ner(
        ["test", "--ckpt_path", ckpt, "--data.test_file", str(tmp_path / "nope.txt")], capsys
    )
    assert "nope.txt" in one_line_error(code, err)


def test_label_unknown_to_checkpoint_is_a_one_line_error(trained, tmp_path, capsys):
    bad = write_tiny_corpus(tmp_path / "bad.txt", [[("john", "B-PER"), ("x", "B-FOOD")]], docs=1)
    code, _, err = run_ner(
        ["test", "--ckpt_path", str(trained["ckpt"] / "best.ckpt"), "--data.test_file", str(bad)],
        capsys,
    )
    line = one_line_error(code, err)
    assert "B-FOOD" in line and "bad.txt" in line


def test_unknown_combiner_class_is_an_error(tiny_model_dir, tiny_corpus_dir, capsys):
    code, _, err = run_ner(
        ["fit", "--model.encoder", str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir),
         "--model.combiner", "ner.modules.combiners.NoSuchCombiner", "--trainer.max_steps", "1"],
        capsys,
    )  # fmt: skip
    line = one_line_error(code, err)
    assert "model.combiner" in line and "NoSuchCombiner" in line


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_corrupt_checkpoint_is_a_one_line_error(trained, tmp_path, capsys, damage):
    good = (trained["ckpt"] / "best.ckpt").read_bytes()
    data = {"truncated": good[: len(good) // 2], "garbage": b"not a checkpoint", "empty": b""}
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(data[damage])
    code, _, err = run_ner(["tag", str(bad), "-"], capsys)
    assert "bad.ckpt" in one_line_error(code, err)


class _WritesFile:
    def __init__(self, target: str):
        self.target = target

    def __reduce__(self):
        return (Path.write_text, (Path(self.target), "pwned"))


def test_pickle_payload_in_checkpoint_never_runs(tmp_path):
    target = tmp_path / "pwned.txt"
    evil = tmp_path / "evil.ckpt"
    torch.save(
        {"state_dict": {}, "ner": {"format_version": 1}, "x": _WritesFile(str(target))}, evil
    )
    with pytest.raises(NERError, match="refused to load"):
        load_tagger(evil)
    assert not target.exists()


def test_checkpoint_naming_an_importable_callable_never_calls_it(trained, tmp_path):
    target = tmp_path / "called.txt"
    checkpoint = torch.load(trained["ckpt"] / "best.ckpt", weights_only=True)
    # Lightning <2.6.6 would import and call this on load_from_checkpoint (Lightning #21822).
    checkpoint["hyper_parameters"]["_instantiator"] = "os.system"
    checkpoint["hyper_parameters"]["_class_path"] = "os.system"
    checkpoint["ner"]["modules"]["combiner"] = {
        "class_path": "pathlib.Path.touch",
        "init_args": {"self": str(target)},
    }
    evil = tmp_path / "evil.ckpt"
    torch.save(checkpoint, evil)
    with pytest.raises(NERError, match="not part of ner"):
        load_tagger(evil)
    assert not target.exists()
    # With the module spec intact, the Lightning-only keys are ignored, not called.
    checkpoint["ner"]["modules"]["combiner"] = {"class_path": "ner.modules.combiners.LastLayer"}
    torch.save(checkpoint, evil)
    assert load_tagger(evil).labels == checkpoint["ner"]["labels"]


def test_console_script_prints_one_line_error(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "ner.cli.main", "tag", str(tmp_path / "missing.ckpt"), "-"],
        capture_output=True,
        text=True,
        env=env,
        input="",
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'missing.ckpt'}: no such checkpoint file"


def test_user_defined_combiner_trains_through_the_cli(tmp_path, tiny_model_dir, tiny_corpus_dir):
    from custom_combiner import MaxOfLayers

    config = fit_config(tmp_path, tiny_model_dir, tiny_corpus_dir)
    cli = run_lightning(
        ["fit", "-c", str(config), "--model.combiner", "custom_combiner.MaxOfLayers",
         "--model.combiner.layers", "[0, -1]", "--trainer.max_steps", "4"]
    )  # fmt: skip
    assert type(cli.model.combiner) is MaxOfLayers and cli.model.combiner.layers == [0, -1]
    assert cli.trainer.global_step == 4
    last = tmp_path / "ckpt" / "last.ckpt"
    # A class outside ner is rebuilt only when the caller vouches for it.
    with pytest.raises(NERError, match="custom_combiner.MaxOfLayers"):
        load_tagger(last)
    tagger = load_tagger(last, extra_classes=[MaxOfLayers])
    assert tagger.combiner.layers == [0, -1]
    assert torch.equal(tagger.head.classifier.weight, cli.model.head.classifier.weight)


NOISE = ("LOAD REPORT", "Tip:", "LeafSpec", "FLOPs", "TPU available", "custom batch sampler",
         "Failed to load", "Enum subclass", "torchvision", "pre-processing", "axis name",
         "WARNING", "transfer_batch_to_device")  # fmt: skip


def test_runs_print_no_known_library_noise(tmp_path, tiny_model_dir, tiny_corpus_dir):
    """`ner fit` and `ner test` as a user runs them: no library adverts or harmless warnings,
    and the test scores printed once (not Lightning's table as well)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    fit = subprocess.run(
        [sys.executable, "-m", "ner.cli.main", "fit", "-c", str(ROOT / "configs" / "trainer.yaml"),
         "--model.encoder", str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir),
         "--trainer.max_epochs", "1", "--run", "quiet", "--trainer.enable_progress_bar", "false"],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert fit.returncode == 0, fit.stderr
    ckpt = tmp_path / "checkpoints" / "quiet" / "best.ckpt"
    test = subprocess.run(
        [sys.executable, "-m", "ner.cli.main", "test", "--ckpt_path", str(ckpt),
         "--data.test_file", str(tiny_corpus_dir / "test.txt"),
         "--trainer.enable_progress_bar", "false"],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert test.returncode == 0, test.stderr
    (tmp_path / "in.txt").write_text("john smith visited paris .\n")
    fast = []  # export (exporter, quantizer), tag on it, and torchao's int8: their imports too
    for args in (["export", str(ckpt), "exp"], ["tag", "exp", "in.txt", "--quantize", "int8"],
                 ["tag", str(ckpt), "in.txt", "--quantize", "int8"]):  # fmt: skip
        run = subprocess.run([sys.executable, "-m", "ner.cli.main", *args],
                             capture_output=True, text=True, env=env, cwd=tmp_path)  # fmt: skip
        assert run.returncode == 0, run.stderr
        fast.append(run.stdout + run.stderr)
    for path in ("exp", "in.txt"):
        shutil.rmtree(tmp_path / path) if path == "exp" else (tmp_path / path).unlink()
    for output in (fit.stdout + fit.stderr, test.stdout + test.stderr, *fast):
        assert not [n for n in NOISE if n in output], output
    assert "model: BertModel (3 x 16) -> LastLayer" in fit.stderr
    assert test.stdout.count("micro avg") == 1 and "test/f1" not in test.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "runs"]  # no litter


def test_tag_consistency_decodes_by_document_as_the_routine_does(trained, tmp_path, capsys):
    conll = tmp_path / "in.conll"
    doc = "Anna NNP I-PER\nmet VB O\nAnna NNP I-PER\n\nAnna NNP I-PER\nleft VB O\n\n"
    conll.write_text(f"-DOCSTART- -X- O\n\n{doc}-DOCSTART- -X- O\n\n{doc}")
    out = tmp_path / "out.conll"
    ckpt = trained["ckpt"] / "best.ckpt"
    code, _, err = run_ner(
        ["tag", str(ckpt), str(conll), "--format", "conll", "--output", str(out),
         "--consistency", "1.0"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    from ner.corpus.inputs import read_inputs
    from ner.corpus.outputs import write_predictions
    from ner.inference.routine import iter_tags

    inp = read_inputs(str(conll))
    assert inp.doc_ids == [0, 0, 1, 1]
    words = [p.words for p in inp.passages]
    tagged = iter_tags(load_tagger(ckpt), words, consistency=1.0, doc_ids=inp.doc_ids)
    write_predictions(inp.passages, tagged, "conll", str(tmp_path / "ref.conll"), inp.corpus)
    assert out.read_text() == (tmp_path / "ref.conll").read_text()
    rows = [ln.split() for ln in out.read_text().splitlines() if ln and "DOCSTART" not in ln]
    assert len(rows) == 10 and all(len(r) == 4 for r in rows)  # one tag a word
