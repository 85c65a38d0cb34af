"""One inference path: a checkpoint's window settings travel with it, `ner test`, `ner predict`,
`ner tag` and `tagger.predict` cut the same windows, and old checkpoints still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import CONTEXT, ROOT, emissions, run_ner, tiny_sentences

from ner.cli.lightning import run_lightning
from ner.corpus.text import entities_from_tags, words_and_offsets
from ner.data.windows import WindowSettings
from ner.inference.routine import iter_tags, map_batches
from ner.model.tagger import load_tagger
from ner.serving.loader import load_model


def test_checkpoint_records_the_window_settings(context_run):
    state = torch.load(context_run["ckpt"], weights_only=True)
    assert state["ner"]["windows"] == {"max_length": 24, "stride": None, "context_pieces": CONTEXT}
    assert load_tagger(context_run["ckpt"]).window_settings == WindowSettings(24, None, CONTEXT)


def test_ner_test_and_tagger_predict_give_the_same_emissions_with_context(context_run):
    test_file = context_run["corpus"] / "test.txt"
    cli = run_lightning(
        ["test", "--ckpt_path", str(context_run["ckpt"]), "--data.test_file", str(test_file),
         "--trainer.enable_progress_bar", "false"]
    )  # fmt: skip
    data = cli.datamodule
    assert data.window_settings == WindowSettings(24, None, CONTEXT)  # taken from the checkpoint
    through_test: dict[int, torch.Tensor] = {}
    cli.model.eval()  # Lightning hands the model back in train mode after testing
    with torch.inference_mode():
        for batch in data.test_dataloader():
            for sent, e in zip(batch["sent_id"].tolist(), emissions(cli.model)(batch), strict=True):
                through_test[sent] = e
    tagger = load_tagger(context_run["ckpt"])
    assert tagger.word_inputs == ("word_shape",)  # trained with casing features (auto, uncased)
    corpus = data.corpus("test")
    words = [s.words for s in corpus.sentences]
    doc_ids = [d for d, doc in enumerate(corpus.documents) for _ in doc.sentences]
    assert len(set(doc_ids)) == 4
    with torch.inference_mode():
        through_predict = list(map_batches(tagger, emissions(tagger), words, doc_ids, bf16=False))
    assert len(through_predict) == len(through_test) == 24
    for i, e in enumerate(through_predict):
        torch.testing.assert_close(e, through_test[i], atol=1e-4, rtol=1e-4)
    # the context is really there: without it the same model gives other emissions
    no_context = WindowSettings(24, None, 0)
    with torch.inference_mode():
        plain = list(map_batches(tagger, emissions(tagger), words, doc_ids, no_context, bf16=False))
    assert (
        max((a - b).abs().max().item() for a, b in zip(plain, through_predict, strict=True)) > 1e-3
    )
    # and `ner test`'s predictions are the tags `tagger.predict` gives
    predicted = tagger.predict(words, doc_ids=doc_ids, bf16=False)
    spans = [{(e["start"], e["end"], e["label"]) for e in entities} for entities in predicted]
    for i, sentence in enumerate(words):
        _, offsets, text = words_and_offsets(sentence)
        tags = cli.model.test_eval.predictions[i]
        expected = entities_from_tags(tags, [1.0] * len(tags), offsets, text)
        assert {(e["start"], e["end"], e["label"]) for e in expected} == spans[i]


@pytest.mark.parametrize("fmt", ["jsonl", "conll"])
@pytest.mark.parametrize("kind", ["text", "conll"])
def test_predict_and_tag_write_byte_identical_outputs(context_run, tmp_path, capsys, fmt, kind):
    ckpt = str(context_run["ckpt"])
    if kind == "conll":
        source = context_run["corpus"] / "test.txt"
    else:
        source = tmp_path / "input.txt"
        source.write_text("John Smith visited Paris today .\n\nthe bank said Mary met Reuters\n")
    out_predict, out_tag = tmp_path / f"predict.{fmt}", tmp_path / f"tag.{fmt}"
    code, _, err = run_ner(
        ["predict", "--ckpt_path", ckpt, "--data.predict_file", str(source), "--output",
         str(out_predict), "--format", fmt, "--data.predict_format", kind,
         "--trainer.enable_progress_bar", "false"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    code, _, err = run_ner(
        ["tag", ckpt, str(source), "--output", str(out_tag), "--format", fmt,
         "--input-format", kind, "--batch-size", "16"],  # ner predict's: --data.batch_size 16
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert out_predict.read_bytes() == out_tag.read_bytes()
    assert out_tag.stat().st_size > 0


# The saved scores are CRF marginals computed on one machine in fp32. Another x86 CPU may run
# other fp32 kernels (AVX2, AVX-512 or AMX; another summation order, FMA or not), each rounding
# off by up to u = 2**-24 relative; a score here is the end of about a thousand dependent
# operations (3 encoder layers, forward-backward over ~10 words), and the summation bound
# n * u = 1e3 * 6e-8 ~ 6e-5 is what it may move. Tags and spans must not move at all.
FP32_SCORE_TOLERANCE = 1e-4


def test_a_checkpoint_written_before_the_redesign_still_loads(tmp_path):
    """tests/data/v1.ckpt: format 1 (no window settings), ScalarMix + first_last + CRF, written
    by the code of commit 7bf919c (class paths of the flat layout), with the tags and entities
    it gave then."""
    expected = json.loads((ROOT / "tests" / "data" / "v1.expected.json").read_text())
    state = torch.load(ROOT / "tests" / "data" / "v1.ckpt", weights_only=True)
    assert state["ner"]["modules"]["combiner"]["class_path"] == "ner.combiners.ScalarMix"
    tagger = load_tagger(ROOT / "tests" / "data" / "v1.ckpt")
    assert type(tagger.combiner).__name__ == "ScalarMix" and tagger.head.crf
    assert tagger.pooling.mode == "first_last"
    assert tagger.window_settings.context_pieces == 0
    entities = tagger.predict(expected["texts"], bf16=False)
    tolerance = FP32_SCORE_TOLERANCE
    for got, want in zip(entities, expected["entities"], strict=True):
        assert [{**e, "score": 0} for e in got] == [{**e, "score": 0} for e in want]
        assert [e["score"] for e in got] == pytest.approx([e["score"] for e in want], abs=tolerance)
    tagged = list(iter_tags(tagger, [t.split() for t in expected["texts"]], bf16=False))
    assert [tags for tags, _ in tagged] == expected["tags"]
    for (_, scores), want in zip(tagged, expected["scores"], strict=True):
        assert scores == pytest.approx(want, abs=tolerance)


def test_old_checkpoint_runs_through_ner_test(tmp_path, capsys, tiny_corpus_dir):
    ckpt = tmp_path / "old.ckpt"
    ckpt.write_bytes((ROOT / "tests" / "data" / "v1.ckpt").read_bytes())
    code, out, err = run_ner(
        ["test", "--ckpt_path", str(ckpt), "--data.test_file", str(tiny_corpus_dir / "test.txt"),
         "--trainer.enable_progress_bar", "false"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert Path(tmp_path / "old.test-report.json").is_file() and "micro avg" in out


def test_ner_test_on_hub_data_writes_every_prediction(context_run, tmp_path, capsys):
    from datasets import DatasetDict
    from helpers import hub_rows

    sentences = tiny_sentences(9, seed=5)
    rows = hub_rows(sentences, docs=3)
    DatasetDict({"train": rows, "validation": rows, "test": rows}).save_to_disk(tmp_path / "hub")
    code, out, err = run_ner(
        ["test", "--ckpt_path", str(context_run["ckpt"]), "--data.hub_name", str(tmp_path / "hub"),
         "--output", str(tmp_path / "report"), "--trainer.enable_progress_bar", "false"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "report" / "last.test-report.json").read_text())
    assert report["test_file"] == f"{tmp_path / 'hub'}[test]"
    blocks = (tmp_path / "report" / "last.test-predictions.txt").read_text().strip().split("\n\n")
    assert len(blocks) == 9  # the -DOCSTART- rows are document marks, not sentences
    gold = [[line.split()[1] for line in block.splitlines()] for block in blocks]
    assert gold == [[t for _, t in s] for s in sentences]  # hub tags written as IOB2


def test_a_checkpoint_of_the_flat_layout_loads_and_tags_as_it_did(capsys, tmp_path):
    """tests/data/v2.ckpt: format 2, written by the last code of the flat layout (e09a02a):
    class paths `ner.combiners.SumLayers`, `ner.heads.LinearHead`, `ner.word_features...`,
    the pooling as a `ner.pooling.WordPooling` spec, 4 context pieces."""
    expected = json.loads((ROOT / "tests" / "data" / "v2.expected.json").read_text())
    assert expected["modules"]["pooling"]["class_path"] == "ner.pooling.WordPooling"
    tagger = load_tagger(ROOT / "tests" / "data" / "v2.ckpt")
    assert type(tagger.combiner).__module__ == "ner.modules.combiners"
    assert tagger.pooling.mode == "mean" and tagger.word_inputs == ("word_shape", "word_chars")
    assert tagger.window_settings == WindowSettings(**expected["windows"])
    entities = tagger.predict(expected["texts"], bf16=False)
    for got, want in zip(entities, expected["entities"], strict=True):
        assert [{**e, "score": 0} for e in got] == [{**e, "score": 0} for e in want]
        scores = [e["score"] for e in want]
        assert [e["score"] for e in got] == pytest.approx(scores, abs=FP32_SCORE_TOLERANCE)
    words = [t.split() for t in expected["texts"]]
    tagged = list(iter_tags(tagger, words, doc_ids=expected["doc_ids"], bf16=False))
    assert [tags for tags, _ in tagged] == expected["tags"]
    # and through the CLI, whose config takes the checkpoint's specs (today's class paths)
    conll = tmp_path / "in.conll"
    conll.write_text("".join(f"{w} O\n" for w in words[0]) + "\n", encoding="utf-8")
    code, out, err = run_ner(["test", "--ckpt_path", str(ROOT / "tests" / "data" / "v2.ckpt"),
                              "--data.test_file", str(conll), "--output", str(tmp_path / "r")],
                             capsys)  # fmt: skip
    assert code == 0, err
    lines = (tmp_path / "r" / "v2.test-predictions.txt").read_text().split("\n\n")[0]
    assert [line.split()[2] for line in lines.splitlines()] == expected["tags"][0]


def test_a_checkpoint_of_the_layout_before_serving_moved_up_tags_as_it_did(capsys, tmp_path):
    """tests/data/v3.ckpt: written by the code before the serving package, the encoder network
    in ner.modules and ner.layer_analysis (4fa16a0): ScalarMix, CRF, casing and characters,
    consistency 1, an empty text among documents. Python, `ner tag` and the serving loader."""
    expected = json.loads((ROOT / "tests" / "data" / "v3.expected.json").read_text())
    path = ROOT / "tests" / "data" / "v3.ckpt"
    for tagger in (load_tagger(path), load_model(str(path), device="cpu")):
        assert tagger.consistency == 1.0
        assert tagger.window_settings == WindowSettings(**expected["windows"])
        entities = tagger.predict(expected["texts"], doc_ids=expected["doc_ids"], bf16=False)
        for got, want in zip(entities, expected["entities"], strict=True):
            assert [{**e, "score": 0} for e in got] == [{**e, "score": 0} for e in want]
            scores = [e["score"] for e in want]
            assert [e["score"] for e in got] == pytest.approx(scores, abs=FP32_SCORE_TOLERANCE)
        words = [t.split() for t in expected["texts"]]
        tagged = iter_tags(tagger, words, doc_ids=expected["doc_ids"], bf16=False)
        assert [tags for tags, _ in tagged] == expected["tags"]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(expected["texts"]) + "\n", encoding="utf-8")
    code, out, err = run_ner(["tag", str(path), str(source), "--device", "cpu"], capsys)
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["text"] for r in records] == expected["texts"]
    assert records[-1]["entities"] == []  # tagged one a line (no documents): the empty one too
