"""The base encoder's architecture (MPNet: no token type ids, `<pad>` = 1, positions after the
padding index, relative position buckets) through every command, on a tiny random MPNet: fit,
test, tag, embed, probe, project, export (ONNX) and serve. And the width a base encoder's
config gives concat-last-4: 4 x 768 = 3,072."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from helpers import fit_config, run_ner, tiny_sentences, write_tiny_corpus
from tiny_mpnet import build_tiny_mpnet

from ner.cli.lightning import run_lightning
from ner.inference.backends import ExportedTagger
from ner.inference.routine import iter_tags
from ner.model.tagger import NERTagger, load_tagger
from ner.modules.combiners import ConcatLayers, ScalarMix
from ner.modules.encoder import depth, hidden_states, load_encoder

LABELS = ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
TEXT = "john smith visited paris with mary ."


@pytest.fixture(scope="module")
def mpnet_dir(tmp_path_factory):
    return build_tiny_mpnet(tmp_path_factory.mktemp("mpnet"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mpnet-corpus")
    for name, seed in (("train.txt", 1), ("dev.txt", 2), ("test.txt", 3)):
        write_tiny_corpus(folder / name, tiny_sentences(20, seed=seed), docs=2)
    return folder


@pytest.fixture(scope="module")
def fitted(mpnet_dir, corpus, tmp_path_factory):
    """`ner fit` on the tiny MPNet with concat-last-4, document context and short windows; the
    source model folder is deleted after, as a checkpoint must not need it."""
    from conftest import inside

    tmp = tmp_path_factory.mktemp("mpnet-fit")
    model = tmp / "model"
    shutil.copytree(mpnet_dir, model)
    with inside(tmp):
        run_lightning(
            ["fit", "-c", str(fit_config(tmp, model, corpus)),
             "--model.combiner", "ner.modules.combiners.ConcatLayers",
             "--data.context_pieces", "4", "--data.max_length", "24", "--trainer.max_steps", "8",
             "--trainer.check_val_every_n_epoch", "1"]
        )  # fmt: skip
    shutil.rmtree(model)
    return tmp / "ckpt" / "last.ckpt"


def test_the_tokenizer_and_encoder_are_mpnet(mpnet_dir):
    tagger = NERTagger(encoder=str(mpnet_dir), labels=LABELS, combiner=ConcatLayers())
    assert type(tagger.encoder).__name__ == "MPNetModel"
    assert tagger.tokenizer.pad_token_id == 1
    assert tagger.head.classifier.in_features == 4 * 16 + tagger.word_features.output_dim()


def test_padding_does_not_change_a_sentence(mpnet_dir):
    """MPNet's positions start after the padding index: a sentence tagged beside a longer one
    (padded) gets the emissions it gets alone."""
    tagger = NERTagger(encoder=str(mpnet_dir), labels=LABELS, combiner=ScalarMix()).eval()
    short, long = TEXT.split(), (TEXT + " and " + TEXT).split()
    alone = list(iter_tags(tagger, [short], bf16=False))
    together = list(iter_tags(tagger, [short, long], bf16=False))
    assert alone[0][0] == together[0][0]
    assert alone[0][1] == pytest.approx(together[0][1], abs=1e-5)


def test_depth_aware_truncation_of_mpnet(mpnet_dir):
    full = load_encoder(str(mpnet_dir))
    cut = load_encoder(str(mpnet_dir), layers=2)
    assert depth(cut) == 2 and cut.config.num_hidden_layers == 2
    ids = torch.tensor([[0, 105, 106, 2]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        want = hidden_states(full, ids, mask)[:3]
        got = hidden_states(cut, ids, mask)
    assert len(got) == 3
    for a, b in zip(got, want, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_concat_last4_of_a_base_sized_config_is_3072_wide(tmp_path):
    """The width comes from config.json (12 layers of 768), not from a constant."""
    base = build_tiny_mpnet(tmp_path / "base", num_layers=12, hidden=768, heads=12)
    tagger = NERTagger(
        encoder=str(base), labels=LABELS, combiner=ConcatLayers(), word_features=None
    )
    assert tagger.combiner.bind(12, 768) == 3072
    assert tagger.head.classifier.in_features == 3072
    assert tagger.predict([TEXT])[0] is not None


def test_fit_test_and_tag(fitted, corpus, tmp_path, capsys):
    tagger = load_tagger(fitted)
    assert type(tagger.encoder).__name__ == "MPNetModel"
    assert tagger.window_settings.context_pieces == 4
    code, out, err = run_ner(["test", "--ckpt_path", str(fitted), "--data.test_file",
                              str(corpus / "test.txt"), "--output", str(tmp_path / "r")],
                             capsys)  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "r" / "last.test-report.json").read_text())
    assert 0 <= report["metrics"]["f1"] <= 1
    source = tmp_path / "in.txt"
    source.write_text(f"{TEXT}\n\n{TEXT} {TEXT}\n", encoding="utf-8")
    code, out, err = run_ner(["tag", str(fitted), str(source)], capsys)
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["text"] for r in records] == [TEXT, "", f"{TEXT} {TEXT}"]
    want = tagger.predict([TEXT])[0]
    assert [(e["label"], e["start"], e["end"]) for e in records[0]["entities"]] == [
        (e["label"], e["start"], e["end"]) for e in want
    ]


def test_embed_every_state(mpnet_dir, corpus, tmp_path, capsys):
    out = tmp_path / "emb"
    code, _, err = run_ner(["embed", str(corpus / "dev.txt"), "--encoder", str(mpnet_dir),
                            "--output", str(out), "--dtype", "float32"], capsys)  # fmt: skip
    assert code == 0, err
    vectors = np.load(out / "embeddings.npy")
    words = sum(1 for line in (corpus / "dev.txt").read_text().splitlines()
                if line.strip() and not line.startswith("-DOCSTART-"))  # fmt: skip
    assert vectors.shape == (words, 4, 16)  # embeddings + 3 layers, one row a word


def test_probe_every_state(mpnet_dir, corpus, tmp_path, capsys):
    out = tmp_path / "probe"
    code, _, err = run_ner(["probe", "--encoder", str(mpnet_dir), "--data-dir", str(corpus),
                            "--epochs", "1", "--seeds", "1", "--output", str(out)],
                           capsys)  # fmt: skip
    assert code == 0, err
    rows = json.loads((out / "probe.json").read_text())
    text = json.dumps(rows)
    assert "concat last 4" in text or "concat" in text


def test_project_and_export(fitted, corpus, tmp_path, capsys):
    code, _, err = run_ner(["project", str(fitted), str(corpus / "dev.txt"), "--output",
                            str(tmp_path / "proj"), "--sample", "40"], capsys)  # fmt: skip
    assert code == 0, err
    assert any((tmp_path / "proj").iterdir())
    code, _, err = run_ner(["export", str(fitted), str(tmp_path / "onnx")], capsys)
    assert code == 0, err
    exported = ExportedTagger(tmp_path / "onnx")  # the folder `ner export` wrote
    fp32 = load_tagger(fitted)
    words = [TEXT.split(), (TEXT + " " + TEXT).split()]
    got = [t for t, _ in iter_tags(exported, words, bf16=False)]
    want = [t for t, _ in iter_tags(fp32, words, bf16=False)]
    assert got == want


def test_serve(fitted):
    from serving import served

    with served(fitted) as client:
        answer = client.post(json={"texts": [TEXT, ""]})
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        want = load_tagger(fitted).predict([TEXT])[0]
        assert [(e["label"], e["start"]) for e in results[0]["entities"]] == [
            (e["label"], e["start"]) for e in want
        ]
        assert results[1]["entities"] == []
