"""Consistency as a checkpoint setting: `ner validate`, `ner test`, `ner predict` and `ner tag`
decode each document with the weight the checkpoint carries (or the command line's), exactly as
`iter_tags(consistency=W)` does, and score it as seqeval does."""

from __future__ import annotations

import pytest
import torch
from helpers import run_ner, tiny_sentences, write_tiny_corpus
from seqeval.metrics import f1_score

from ner.cli.lightning import run_lightning
from ner.corpus.inputs import read_inputs
from ner.corpus.outputs import write_predictions
from ner.corpus.reader import read_conll
from ner.inference.routine import iter_tags
from ner.model.tagger import load_tagger

FP32 = ["--trainer.precision", "32-true", "--trainer.enable_progress_bar", "false"]
STRONG = 3.0  # a weight that changes tags of the tiny model


def evaluate(command: str, ckpt, test_file, *extra: str):
    """`ner validate|test` in-process on `test_file`; the CLI (model, trainer) after it."""
    split = {"test": "--data.test_file", "validate": "--data.val_file"}[command]
    return run_lightning([command, "--ckpt_path", str(ckpt), split, str(test_file), *FP32, *extra])


def routine_tags(ckpt, test_file, weight: float | None) -> tuple[list[list[str]], list[list[str]]]:
    """(gold, predicted) tags of a file by the inference routine at `weight`, in fp32."""
    corpus = read_conll(str(test_file))
    words = [s.words for s in corpus.sentences]
    tagged = iter_tags(load_tagger(ckpt), words, weight, doc_ids=corpus.doc_ids, bf16=False)
    return [s.tags for s in corpus.sentences], [tags for tags, _ in tagged]


def unsure(context_run, folder, weight: float):
    """`context_run`'s checkpoint made unsure of every word (its classifier scaled down, so no
    occurrence is gated off as sure), with `consistency: weight` recorded in it."""
    state = torch.load(context_run["ckpt"], weights_only=True)
    for name in ("head.classifier.weight", "head.classifier.bias"):
        state["state_dict"][name] = state["state_dict"][name] * 0.1
    state["ner"]["hparams"]["consistency"] = weight
    path = folder / f"unsure-{weight}.ckpt"
    torch.save(state, path)
    return path


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """A file of 4 documents whose names are capitalised, so consistency reads them."""
    sentences = [
        [(w.capitalize() if t != "O" else w, t) for w, t in sentence]
        for sentence in tiny_sentences(24, seed=3)
    ]
    return write_tiny_corpus(tmp_path_factory.mktemp("named") / "named.txt", sentences, docs=4)


@pytest.fixture(scope="module")
def plain_ckpt(context_run, tmp_path_factory):
    """An unsure checkpoint that records consistency 0 (off)."""
    return unsure(context_run, tmp_path_factory.mktemp("plain"), 0.0)


@pytest.fixture(scope="module")
def consistent_ckpt(context_run, tmp_path_factory):
    """An unsure checkpoint that records `consistency: STRONG`."""
    return unsure(context_run, tmp_path_factory.mktemp("consistent"), STRONG)


def test_ner_test_decodes_documents_as_the_routine_does(named, plain_ckpt):
    ckpt, test_file = plain_ckpt, named
    gold, plain = routine_tags(ckpt, test_file, 0.0)
    _, strong = routine_tags(ckpt, test_file, STRONG)
    assert strong != plain  # the weight changes tags: the comparison below can fail
    for weight, expected in ((0.0, plain), (STRONG, strong)):
        cli = evaluate("test", ckpt, test_file, "--model.consistency", str(weight))
        predictions = cli.model.test_eval.predictions
        assert [predictions[i] for i in range(len(gold))] == expected
        assert cli.model.test_report["f1"] == pytest.approx(f1_score(gold, expected))


def test_validation_scores_the_document_decoding(named, plain_ckpt):
    ckpt, dev_file = plain_ckpt, named
    gold, strong = routine_tags(ckpt, dev_file, STRONG)
    _, plain = routine_tags(ckpt, dev_file, 0.0)
    assert f1_score(gold, strong) != pytest.approx(f1_score(gold, plain))  # can fail
    cli = evaluate("validate", ckpt, dev_file, "--model.consistency", str(STRONG))
    assert cli.trainer.callback_metrics["val/f1"].item() == pytest.approx(f1_score(gold, strong))


def test_the_checkpoints_weight_applies_unless_the_command_line_gives_one(
    named, plain_ckpt, consistent_ckpt
):
    test_file = named
    assert load_tagger(consistent_ckpt).consistency == STRONG
    assert load_tagger(plain_ckpt).consistency == 0.0
    gold, strong = routine_tags(consistent_ckpt, test_file, None)  # None: the model's weight
    assert (gold, strong) == routine_tags(plain_ckpt, test_file, STRONG)
    cli = evaluate("test", consistent_ckpt, test_file)
    assert cli.model.consistency == STRONG
    assert cli.model.test_report["f1"] == pytest.approx(f1_score(gold, strong))
    cli = evaluate("test", consistent_ckpt, test_file, "--model.consistency", "0")
    _, plain = routine_tags(consistent_ckpt, test_file, 0.0)
    assert f1_score(gold, strong) != pytest.approx(f1_score(gold, plain))
    assert cli.model.test_report["f1"] == pytest.approx(f1_score(gold, plain))


def test_predict_and_tag_decode_with_the_checkpoints_weight(
    named, consistent_ckpt, tmp_path, capsys
):
    # both at the automatic precision (bf16 where the CPU runs it fast), as the routine below
    source = named
    out_predict, out_tag = tmp_path / "predict.conll", tmp_path / "tag.conll"
    code, _, err = run_ner(
        ["predict", "--ckpt_path", str(consistent_ckpt), "--data.predict_file", str(source),
         "--output", str(out_predict), "--format", "conll", "--trainer.enable_progress_bar",
         "false"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    code, _, err = run_ner(
        ["tag", str(consistent_ckpt), str(source), "--format", "conll", "--output", str(out_tag)],
        capsys,
    )
    assert code == 0, err
    inp = read_inputs(str(source))
    words = [p.words for p in inp.passages]
    tagged = iter_tags(load_tagger(consistent_ckpt), words, doc_ids=inp.doc_ids)
    write_predictions(inp.passages, tagged, "conll", str(tmp_path / "ref.conll"), inp.corpus)
    assert out_predict.read_text() == (tmp_path / "ref.conll").read_text()
    assert out_tag.read_text() == out_predict.read_text()
    plain = iter_tags(load_tagger(consistent_ckpt), words, 0.0, doc_ids=inp.doc_ids)
    write_predictions(inp.passages, plain, "conll", str(tmp_path / "plain.conll"), inp.corpus)
    assert out_predict.read_text() != (tmp_path / "plain.conll").read_text()
