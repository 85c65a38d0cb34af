"""`ner embed` and `ner.layer_analysis.embed`: word vectors of every hidden state, checked against
the encoder's own `output_hidden_states=True` tensors pooled by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from helpers import one_line_error, run_ner

from ner.data.alignment import align_rows
from ner.layer_analysis.embed import WordStates, embed, iter_word_states

LONG = "john smith visited paris and the bank of berlin said acme corp works in london".split()
ZERO = "\u200b"  # a format character: BERT's tokenizer drops it, leaving the word no piece


def by_hand(model, sentence: list[str]) -> np.ndarray:
    """`[words, layers, hidden]`: each window through the encoder alone, and each word's first
    piece taken by a plain loop over the alignment's piece owners."""
    rows = align_rows(model.tokenizer, [sentence], [0], model.window_settings)
    out = np.zeros((len(sentence), model.encoder.config.num_hidden_layers + 1, 16), np.float32)
    seen = set()
    for ids, owners in zip(rows["input_ids"][0], rows["piece_word"][0], strict=True):
        with torch.no_grad():
            states = model.encoder(torch.tensor([ids]), output_hidden_states=True).hidden_states
        for position, word in enumerate(owners):
            if word >= 0 and word not in seen:
                seen.add(word)
                out[word] = torch.stack([s[0, position] for s in states]).numpy()
    assert seen == set(range(len(sentence)))  # every word owns a piece somewhere
    return out


def test_rows_equal_hidden_states_pooled_by_hand(tiny_model_dir):
    model = WordStates.of_encoder(str(tiny_model_dir))
    model.window_settings = replace(model.window_settings, max_length=8, stride=3)
    sentences = [LONG, ["acme", ZERO, "corp"], ["paris"]]
    got = [states for states, _ in iter_word_states(model, sentences)]
    rows = align_rows(model.tokenizer, [LONG], [0], model.window_settings)
    assert len(rows["input_ids"][0]) > 2  # the long sentence spans several windows
    for sentence, states in zip(sentences, got, strict=True):
        assert states.shape == (len(sentence), 4, 16)
        np.testing.assert_allclose(states, by_hand(model, sentence), atol=1e-5)


def test_python_api_combines_layers(tiny_model_dir):
    texts = ["john smith visited paris", "the bank"]
    full = embed(texts, encoder=str(tiny_model_dir))
    assert [a.shape for a in full] == [(4, 4, 16), (2, 4, 16)]
    concat = embed(texts, encoder=str(tiny_model_dir), layers=[-4, -3, -2, -1], how="concat")
    np.testing.assert_allclose(concat[0], full[0].reshape(4, 64), atol=1e-6)
    mean = embed(texts, encoder=str(tiny_model_dir), layers=[0, -1], how="mean")
    np.testing.assert_allclose(mean[1], (full[1][:, 0] + full[1][:, 3]) / 2, atol=1e-6)


def test_ner_embed_writes_memory_mapped_rows_words_and_meta(tiny_model_dir, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("john smith visited paris\n\nthe bank of berlin\n", encoding="utf-8")
    out = tmp_path / "emb"
    code, _, err = run_ner(["embed", str(text), "--encoder", str(tiny_model_dir), "--output",
                            str(out), "--dtype", "float32"], capsys)  # fmt: skip
    assert code == 0, err
    vectors = np.load(out / "embeddings.npy", mmap_mode="r")
    assert vectors.shape == (8, 4, 16) and vectors.dtype == np.float32
    words = [json.loads(line) for line in (out / "words.jsonl").read_text().splitlines()]
    assert [w["text"] for w in words] == "john smith visited paris the bank of berlin".split()
    assert [(w["sentence"], w["line"]) for w in words][3:5] == [(0, 1), (2, 3)]
    lines = text.read_text().splitlines()
    assert all(lines[w["line"] - 1][w["start"] : w["end"]] == w["text"] for w in words)
    expected = embed(lines, encoder=str(tiny_model_dir))
    np.testing.assert_allclose(vectors, np.concatenate(expected), atol=1e-5)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["layers"] == [0, 1, 2, 3] and meta["shapes"] == {"embeddings": [8, 4, 16]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb", "in.txt"]  # no staging left


def test_ner_embed_checkpoint_adds_combiner_output_and_gold(trained, tmp_path, capsys):
    conll = tmp_path / "in.conll"
    conll.write_text("-DOCSTART- O\n\njohn B-PER\nvisited O\n\nparis B-LOC\n", encoding="utf-8")
    out = tmp_path / "emb"
    code, _, err = run_ner(["embed", str(conll), "--ckpt_path", str(trained["ckpt"] / "best.ckpt"),
                            "--output", str(out), "--combine", "concat"], capsys)  # fmt: skip
    assert code == 0, err
    vectors, mixed = np.load(out / "embeddings.npy"), np.load(out / "combiner.npy")
    assert vectors.shape == (3, 4 * 16) and mixed.shape == (3, 16)
    # the trained combiner is LastLayer: its output is the last hidden state's block
    np.testing.assert_allclose(mixed, vectors[:, -16:], atol=2e-3)  # both float16
    words = [json.loads(line) for line in (out / "words.jsonl").read_text().splitlines()]
    assert [w["gold"] for w in words] == ["B-PER", "O", "B-LOC"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", "0,9"], "--layers: layer 9 does not exist"),
        (["--layers", "a,b"], "--layers: 'a,b' is not 'all'"),
    ],
)
def test_ner_embed_bad_layers(tiny_model_dir, tmp_path, capsys, args, message):
    text = tmp_path / "in.txt"
    text.write_text("john\n", encoding="utf-8")
    code, _, err = run_ner(["embed", str(text), "--encoder", str(tiny_model_dir), "--output",
                            str(tmp_path / "emb"), *args], capsys)  # fmt: skip
    assert one_line_error(code, err).startswith(f"error: {message}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_ner_embed_empty_input_and_bad_output(tiny_model_dir, tmp_path, capsys):
    empty, text = tmp_path / "empty.txt", tmp_path / "in.txt"
    empty.write_text("", encoding="utf-8")
    text.write_text("john\n", encoding="utf-8")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    cases = [
        (empty, tmp_path / "a", f"error: {empty}: no text to tag"),
        (text, tmp_path / "full", f"error: {tmp_path / 'full'}: exists and is not an empty"),
        (text, tmp_path / "no" / "b", f"error: {tmp_path / 'no'}: output's parent folder"),
    ]
    for source, out, message in cases:
        code, _, err = run_ner(["embed", str(source), "--encoder", str(tiny_model_dir),
                                "--output", str(out)], capsys)  # fmt: skip
        assert one_line_error(code, err).startswith(message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt", "full", "in.txt"]
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
