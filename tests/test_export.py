"""`ner export`: the ONNX folder runs with onnxruntime alone and gives the checkpoint's emissions,
for every built-in combiner and pooling, CRF decoding data included; failures are one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import LABELS, emissions, run_ner

from ner.inference.backends import ExportedTagger
from ner.inference.export import export_onnx
from ner.inference.routine import map_batches
from ner.model.tagger import NERTagger
from ner.modules.combiners import (
    ConcatLayers,
    LastLayer,
    MeanLayers,
    ScalarMix,
    SingleLayer,
    SumLayers,
)
from ner.modules.heads import LinearHead
from ner.modules.word_features import WordFeatures
from ner.utils.errors import NERError

# lower-case words and full stops only: the casing class of each is known without ner.corpus.shapes
SENTENCES = [
    ["john", "smith", "visited", "paris", "."],
    ["the", "bank", "of", "new", "york", "city", "said", "today", "."],
    ["mary", "."],
]
# Runs in a fresh interpreter with onnxruntime, numpy and the tokenizer only: ner.json and the
# tokenizer files tell it everything; it must not import any part of ner.
STANDALONE = r"""
import json, sys
import numpy as np, onnxruntime as ort
from transformers import AutoTokenizer
folder, sentences = sys.argv[1], json.loads(sys.argv[2])
meta = json.load(open(f"{folder}/ner.json"))
tok = AutoTokenizer.from_pretrained(f"{folder}/tokenizer")
enc = tok(sentences, is_split_into_words=True, padding=True)
B, W = len(sentences), max(map(len, sentences))
piece_word = np.array([[-1 if w is None else b * W + w for w in enc.word_ids(b)]
                       for b in range(B)], dtype=np.int64)
word_mask = np.array([[w < len(s) for w in range(W)] for s in sentences])
shape = {c: meta["word_shapes"].index(c) for c in ("all_lower", "punctuation")}
word_shape = np.array([[shape["punctuation" if w == "." else "all_lower"] for w in s]
                       + [0] * (W - len(s)) for s in sentences], dtype=np.int64)
feed = {"input_ids": np.array(enc["input_ids"], dtype=np.int64),
        "attention_mask": np.array(enc["attention_mask"], dtype=np.int64),
        "piece_word": piece_word, "word_mask": word_mask, "word_shape": word_shape}
session = ort.InferenceSession(f"{folder}/{meta['models']['float32']}")
feed = {i.name: feed[i.name] for i in session.get_inputs()}
np.save(sys.argv[3], session.run(None, feed)[0])
assert not [m for m in sys.modules if m == "ner" or m.startswith("ner.")], "imported ner"
"""


def tagger(tiny_model_dir: Path, **parts) -> NERTagger:
    torch.manual_seed(0)
    return NERTagger(encoder=str(tiny_model_dir), labels=LABELS, **parts).eval()


def reference(model: NERTagger) -> list[np.ndarray]:
    """The torch emissions of each sentence, `[words, labels]`, through the inference routine."""
    return [e.numpy() for e in map_batches(model, emissions(model), SENTENCES, bf16=False)]


def test_export_runs_with_onnxruntime_alone(tmp_path, tiny_model_dir):
    model = tagger(
        tiny_model_dir, word_features=WordFeatures(), head=LinearHead(crf=True), consistency=1.5
    )
    folder = export_onnx(model, tmp_path / "export")
    out = tmp_path / "emissions.npy"
    subprocess.run(
        [sys.executable, "-c", STANDALONE, str(folder), json.dumps(SENTENCES), str(out)],
        check=True,
        cwd=tmp_path,  # not the repository: `ner` is importable only if installed, and unused
    )
    emissions = np.load(out)  # [sentences, words, labels]
    for got, want, words in zip(emissions, reference(model), SENTENCES, strict=True):
        np.testing.assert_allclose(got[: len(words)], want, atol=1e-5)
    meta = json.loads((folder / "ner.json").read_text())
    crf = model.head.crf_layer
    np.testing.assert_allclose(meta["decoding"]["transitions"], crf.transitions.detach())
    assert meta["decoding"]["transition_allowed"] == model.head.trans_allowed.tolist()
    assert meta["labels"] == LABELS and (folder / "model.int8.onnx").is_file()
    assert meta["decoding"]["consistency"] == 1.5  # an export decodes as its checkpoint does
    assert ExportedTagger(folder).consistency == 1.5


@pytest.mark.parametrize(
    "combiner, pooling",
    [
        (LastLayer(), "first"),
        (SingleLayer(1), "last"),
        (SumLayers([-2, -1]), "mean"),
        (MeanLayers([0, 1, 2, 3]), "first_last"),
        (ConcatLayers([-2, -1]), "first"),
        (ScalarMix(), "mean"),
    ],
    ids=lambda x: type(x).__name__ if not isinstance(x, str) else x,
)
def test_every_built_in_combiner_and_pooling_exports(tmp_path, tiny_model_dir, combiner, pooling):
    from ner.inference.backends import ExportedTagger

    model = tagger(tiny_model_dir, combiner=combiner, pooling=pooling)
    folder = export_onnx(model, tmp_path / "export", int8=False)
    exported = ExportedTagger(folder)
    got_all = map_batches(exported, emissions(exported), SENTENCES)
    for got, want in zip(got_all, reference(model), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_character_features_export(tmp_path, tiny_model_dir):
    """The character CNN's byte input through the graph: mixed case, non-ASCII and a word past
    the byte limit that `ner.json` states."""
    from ner.inference.backends import ExportedTagger

    features = WordFeatures(casing_dim=4, char_dim=4, char_filters=6)
    model = tagger(tiny_model_dir, word_features=features)
    sentences = [["McDonald", "visited", "Zürich", "."], ["Donaudampfschifffahrtsgesellschaft"]]
    folder = export_onnx(model, tmp_path / "export", int8=False)
    meta = json.loads((folder / "ner.json").read_text())
    assert meta["word_inputs"] == ["word_shape", "word_chars"] and meta["word_bytes"] == 24
    exported = ExportedTagger(folder)
    got = map_batches(exported, emissions(exported), sentences)
    want = map_batches(model, emissions(model), sentences, bf16=False)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)


class BranchingCombiner(LastLayer):
    """A user combiner whose control flow depends on the data: no single graph computes it."""

    def forward(self, hidden_states, mask):
        states = hidden_states[-1]
        return states * 2.0 if float(states.abs().max()) > 1.0 else states


def test_a_combiner_that_cannot_export_gets_a_one_line_error(tmp_path, tiny_model_dir):
    model = tagger(tiny_model_dir, combiner=BranchingCombiner())
    with pytest.raises(NERError, match="cannot export this model to ONNX") as caught:
        export_onnx(model, tmp_path / "export", int8=False)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "export").exists() and list(tmp_path.iterdir()) == []


def test_ner_export_cli_and_its_errors(tmp_path, capsys, context_run):
    ckpt = context_run["ckpt"]
    code, out, err = run_ner(["export", str(ckpt), str(tmp_path / "out")], capsys)
    assert code == 0, err
    assert "model.onnx" in out and (tmp_path / "out" / "ner.json").is_file()
    code, _, err = run_ner(["export", str(ckpt), str(tmp_path / "out")], capsys)
    assert code == 2 and err.strip().endswith(
        "exists and is not an empty folder; nothing was written"
    )
    code, _, err = run_ner(["export", str(tmp_path / "nope.ckpt"), str(tmp_path / "o2")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and not (tmp_path / "o2").exists()
