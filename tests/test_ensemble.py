"""Ensembles: several taggers of one recipe averaged, against each member computed alone."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import (
    LABELS,
    load_script,
    one_line_error,
    run_ner,
    tiny_sentences,
    tiny_tagger_batch,
    write_tiny_corpus,
)

from ner.corpus.schemes import allowed_transitions
from ner.inference.ensemble import Ensemble
from ner.inference.routine import decode_batch
from ner.utils.errors import NERError


def member_probs(model, batch) -> torch.Tensor:
    with torch.inference_mode():
        return model.head.probabilities(model(batch), batch["word_mask"])


def test_softmax_members_average_their_distributions(tiny_model_dir):
    (a, batch) = tiny_tagger_batch(tiny_model_dir, 1, crf=False)
    (b, _) = tiny_tagger_batch(tiny_model_dir, 2, crf=False)
    expected = (member_probs(a, batch) + member_probs(b, batch)) / 2  # [B, W, C]
    ensemble = Ensemble([a, b]).eval()
    with torch.inference_mode():
        got = ensemble(batch).exp()
    mask = batch["word_mask"]
    assert torch.allclose(got[mask], expected[mask], atol=1e-6)
    assert torch.allclose(got[mask].sum(-1), torch.ones(int(mask.sum())), atol=1e-5)


def test_crf_members_make_one_crf_of_their_means(tiny_model_dir):
    (a, batch), (b, _) = tiny_tagger_batch(tiny_model_dir, 1), tiny_tagger_batch(tiny_model_dir, 2)
    with torch.no_grad():  # the fixtures' CRFs start at zero: give each its own transitions
        for seed, model in ((1, a), (2, b)):
            for param in model.head.crf_layer.parameters():
                param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(seed)))
    ensemble = Ensemble([a, b]).eval()
    with torch.inference_mode():
        got, ea, eb = ensemble(batch), a(batch).float(), b(batch).float()
    assert torch.allclose(got, (ea + eb) / 2, atol=1e-6)
    crf, ca, cb = ensemble.head.crf_layer, a.head.crf_layer, b.head.crf_layer
    for name in ("transitions", "start_transitions", "end_transitions"):
        mean = (ca.get_parameter(name) + cb.get_parameter(name)) / 2
        assert torch.equal(crf.get_parameter(name), mean)


def test_one_crf_member_tags_as_itself(tiny_model_dir):
    model, batch = tiny_tagger_batch(tiny_model_dir, 3)
    with torch.no_grad():
        model.head.crf_layer.transitions.copy_(torch.randn(len(LABELS), len(LABELS)))
    with torch.inference_mode():
        alone, ensembled = decode_batch(model, batch), decode_batch(Ensemble([model]), batch)
    assert [tags for tags, _ in ensembled] == [tags for tags, _ in alone]
    for (_, s1), (_, s2) in zip(ensembled, alone, strict=True):
        assert s1 == pytest.approx(s2, abs=1e-6)


def test_one_softmax_member_tags_as_itself(tiny_model_dir):
    model, batch = tiny_tagger_batch(tiny_model_dir, 3, crf=False)
    with torch.inference_mode():
        alone, ensembled = decode_batch(model, batch), decode_batch(Ensemble([model]), batch)
    assert [tags for tags, _ in ensembled] == [tags for tags, _ in alone]
    for (_, s1), (_, s2) in zip(ensembled, alone, strict=True):
        assert s1 == pytest.approx(s2, abs=1e-6)


def test_ensemble_tags_are_valid_iob2(tiny_model_dir):
    members = [tiny_tagger_batch(tiny_model_dir, seed)[0] for seed in (4, 5, 6)]
    texts = ["Anna lives in Paris .", "U.S. troops met John Smith in Berlin", "ok"]
    start, allowed = allowed_transitions(LABELS)
    index = {label: i for i, label in enumerate(LABELS)}
    for entities, text in zip(Ensemble(members).predict(texts, bf16=False), texts, strict=True):
        for entity in entities:
            assert text[entity["start"] : entity["end"]] == entity["text"]
            assert 0.0 < entity["score"] <= 1.0
    tagged = Ensemble(members).eval()
    _, batch = tiny_tagger_batch(tiny_model_dir)
    with torch.inference_mode():
        for tags, _ in decode_batch(tagged, batch):
            ids = [index[t] for t in tags]
            assert start[ids[0]] and all(
                allowed[i][j] for i, j in zip(ids[:-1], ids[1:], strict=True)
            )


def test_members_must_share_labels(tiny_model_dir):
    a, _ = tiny_tagger_batch(tiny_model_dir, 1)
    b, _ = tiny_tagger_batch(tiny_model_dir, 2)
    b.labels = [*b.labels, "B-MISC"]
    with pytest.raises(NERError, match="^two.ckpt: its labels differ from one.ckpt's$"):
        Ensemble([a, b], ["one.ckpt", "two.ckpt"])


def test_tag_with_an_ensemble_of_checkpoints(trained, tmp_path, capsys):
    ckpt = str(trained["ckpt"] / "best.ckpt")
    text = tmp_path / "input.txt"
    text.write_text("John Smith visited Paris today .\nthe bank said Mary met Reuters\n")
    code, out, err = run_ner(["tag", ckpt, str(text), "--ensemble", ckpt], capsys)
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["text"] for r in records] == text.read_text().splitlines()
    code, _, err = run_ner(
        ["tag", ckpt, str(text), "--ensemble", ckpt, "--backend", "onnx"], capsys
    )
    assert "--ensemble" in one_line_error(code, err)


def test_ensemble_script_scores_members_and_ensemble(trained, tiny_corpus_dir, tmp_path, capsys):
    """`scripts/ensemble.py`: each member's F1 is seqeval's on its own tags."""
    from seqeval.metrics import f1_score

    from ner.corpus.reader import read_conll
    from ner.inference.routine import iter_tags
    from ner.model.tagger import load_tagger

    module = load_script("ensemble", "ensemble_script")
    ckpt, dev = str(trained["ckpt"] / "best.ckpt"), tiny_corpus_dir / "dev.txt"
    out = tmp_path / "ensemble.json"
    module.main([ckpt, ckpt, "--file", str(dev), "--json", str(out)])
    rows = json.loads(out.read_text())
    sentences = read_conll(str(dev)).sentences
    tags = [t for t, _ in iter_tags(load_tagger(ckpt), [s.words for s in sentences])]
    expected = f1_score([s.tags for s in sentences], tags)
    assert rows[ckpt]["f1"] == pytest.approx(expected)
    assert 0.0 <= rows["ensemble"]["f1"] <= 1.0
    assert "| ensemble |" in capsys.readouterr().out


def test_ensemble_script_gives_the_documents_training_saw(trained, tmp_path, monkeypatch):
    """Regression: the script read a file without -DOCSTART- as one document, so a model trained
    with context saw unrelated neighbours that training had not given it (dev F1 82.9 by `ner
    seeds` read as 79.3)."""
    module = load_script("ensemble", "ensemble_script")
    seen = []

    def iter_tags(model, words, consistency=None, doc_ids=None):
        seen.append(list(doc_ids))
        weights.append(consistency)
        return [(["O"] * len(w), None) for w in words]

    weights: list[float | None] = []

    monkeypatch.setattr(module, "iter_tags", iter_tags)
    ckpt = str(trained["ckpt"] / "best.ckpt")
    plain = write_tiny_corpus(tmp_path / "plain.txt", tiny_sentences(5, seed=2), docs=0)
    module.main([ckpt, "--file", str(plain)])
    marked = write_tiny_corpus(tmp_path / "marked.txt", tiny_sentences(4, seed=2), docs=2)
    module.main([ckpt, "--file", str(marked)])
    assert seen == [[0, 1, 2, 3, 4]] * 2 + [[0, 0, 1, 1]] * 2  # the member, then the ensemble
    assert weights == [None] * 4  # each checkpoint's own consistency weight
    module.main([ckpt, "--file", str(marked), "--consistency", "2"])
    assert weights[4:] == [2.0, 2.0]
