"""Ensembles: several taggers of one recipe averaged, against each member computed alone."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import (
    LABELS,
    decisive,
    emissions,
    one_line_error,
    run_ner,
    save_checkpoint,
    tiny_sentences,
    tiny_tagger_batch,
    write_tiny_corpus,
)
from seqeval.metrics import f1_score

from ner.corpus.schemes import allowed_transitions
from ner.corpus.text import entities_from_tags, words_and_offsets
from ner.inference.ensemble import Ensemble
from ner.inference.routine import decode_batch, map_batches
from ner.model.tagger import load_tagger
from ner.modules.heads import LinearHead
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


@pytest.fixture(scope="module")
def pair(tiny_model_dir, tmp_path_factory) -> list[str]:
    """Two checkpoints of one recipe (CRF heads) with different weights."""
    folder = tmp_path_factory.mktemp("pair")
    return [
        save_checkpoint(decisive(tiny_tagger_batch(tiny_model_dir, seed)[0], seed),
                        folder / f"seed-{seed}.ckpt")
        for seed in (1, 2)
    ]  # fmt: skip


def mean_decoded(paths: list[str], words: list[list[str]]) -> list[list[str]]:
    """The tags of the members' mean emissions decoded by a CRF of their mean transitions,
    computed here from each member alone."""
    members = [load_tagger(p) for p in paths]
    per_member = [list(map_batches(m, emissions(m), words, bf16=False)) for m in members]
    crf = LinearHead(crf=True)
    crf.bind(1, members[0].labels)
    with torch.no_grad():
        for name, param in crf.crf_layer.named_parameters():
            param.copy_(sum(m.head.crf_layer.get_parameter(name) for m in members) / len(members))
    tags = []
    for sentence in zip(*per_member, strict=True):
        mean = (sum(sentence) / len(sentence))[None]  # [1, W, C]
        best, _ = crf.decode(mean, torch.ones(mean.shape[:2], dtype=torch.bool))
        tags.append([members[0].labels[i] for i in best[0].tolist()])
    return tags


def test_tag_with_an_ensemble_of_two_checkpoints(pair, tmp_path, capsys):
    """`ner tag A --ensemble B` tags as the mean of A's and B's emissions decoded, which is
    neither A's tagging nor B's."""
    lines = ["John Smith visited Paris today .", "the bank said Mary met Reuters in Berlin",
             "Acme Corp works in London with John"]  # fmt: skip
    text = tmp_path / "input.txt"
    text.write_text("\n".join(lines) + "\n")
    code, out, err = run_ner(["tag", pair[0], str(text), "--ensemble", pair[1], "--device",
                              "cpu"], capsys)  # fmt: skip
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["text"] for r in records] == lines
    words = [line.split() for line in lines]
    want = [entities_from_tags(t, [1.0] * len(t), o, line) for t, (_, o, line) in
            zip(mean_decoded(pair, words), map(words_and_offsets, lines), strict=True)]  # fmt: skip
    spans = [[(e["start"], e["end"], e["label"]) for e in r["entities"]] for r in records]
    assert spans == [[(e["start"], e["end"], e["label"]) for e in found] for found in want]
    for path in pair:
        alone = load_tagger(path).predict(lines, bf16=False)
        assert [[(e["start"], e["end"], e["label"]) for e in f] for f in alone] != spans
    code, _, err = run_ner(["tag", pair[0], str(text), "--ensemble", pair[1], "--backend", "onnx"],
                           capsys)  # fmt: skip
    assert "--ensemble" in one_line_error(code, err)


def test_the_ensemble_scores_its_mean_emissions_decoded(pair, tmp_path, capsys):
    """`ner score A B`: the ensemble's F1 is seqeval's on the mean emissions decoded, and it
    differs from each member's."""
    sentences = tiny_sentences(16, seed=5)
    words = [[w.capitalize() for w, _ in s] for s in sentences]
    tags = mean_decoded(pair, words)
    gold = [t if i % 2 else ["O"] * len(t) for i, t in enumerate(tags)]  # half its own tags
    rows = [list(zip(w, g, strict=True)) for w, g in zip(words, gold, strict=True)]
    dev = write_tiny_corpus(tmp_path / "dev.txt", rows, docs=0)
    out = tmp_path / "scores.json"
    args = ["score", *pair, "--file", str(dev), "--consistency", "0", "--json", str(out)]
    code, _, err = run_ner(args, capsys)
    assert code == 0, err
    scores = {name: s["0.0"]["f1"] for name, s in json.loads(out.read_text()).items()}
    assert scores["ensemble"] == pytest.approx(f1_score(gold, tags), abs=1e-12)
    assert scores["ensemble"] not in (scores[pair[0]], scores[pair[1]])
