"""`ner export`: the ONNX folder runs with onnxruntime alone and gives the checkpoint's emissions,
for every built-in combiner and pooling, CRF decoding data included; failures are one line. Its
int8 graph quantizes activations row by row, as stated."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from helpers import LABELS, emissions, run_ner
from onnx import TensorProto, helper, numpy_helper

from ner.cli.serve import describe
from ner.inference.backends import ExportedTagger
from ner.inference.export import export_onnx
from ner.inference.int8 import quantize_int8
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
from ner.serving.loader import load_model
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


def test_export_carries_the_model_card(tmp_path, capsys, trained):
    # best.ckpt beside the card `ner fit` wrote for it, and alone
    runs = {"card": ("best.ckpt", "README.md"), "none": ("best.ckpt",)}
    for run, names in runs.items():
        (tmp_path / run).mkdir()
        for name in names:
            shutil.copy(trained["ckpt"] / name, tmp_path / run / name)
        out = str(tmp_path / run / "out")
        code, _, err = run_ner(["export", str(tmp_path / run / "best.ckpt"), out, "--no-int8"],
                               capsys)  # fmt: skip
        assert code == 0, err
    card = tmp_path / "card" / "out" / "README.md"
    assert card.read_bytes() == (tmp_path / "card" / "README.md").read_bytes()
    assert not (tmp_path / "none" / "out" / "README.md").exists()
    # `ner serve` of the export folder links its card in /info, as it does a checkpoint's
    for run, expected in (("card", str(card.resolve())), ("none", None)):
        folder = str(tmp_path / run / "out")
        args = argparse.Namespace(checkpoint=folder, backend="onnx", quantize=None)
        assert describe(load_model(folder, "onnx", None, "cpu"), args)["model_card"] == expected


def test_a_card_that_cannot_be_copied_leaves_no_export(tmp_path, tiny_model_dir):
    with pytest.raises(NERError) as caught:
        export_onnx(tagger(tiny_model_dir), tmp_path / "export", int8=False,
                    card=tmp_path / "README.md")  # fmt: skip
    assert str(caught.value).startswith(f"{tmp_path / 'README.md'}: cannot copy the model card")
    assert list(tmp_path.iterdir()) == []


def linear_graph(path: Path, w: np.ndarray, v: np.ndarray, bias: np.ndarray) -> Path:
    """x [B, T, K] -> (x @ w + bias, x @ v, x @ x^T): two linear layers that read one input
    and a product of activations, which has no weight to quantize."""
    k = w.shape[0]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "bias"], ["y"]),
        helper.make_node("MatMul", ["x", "v"], ["z"]),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["x", "xt"], ["gram"]),
    ]
    outputs = [
        helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "z", "gram")
    ]
    graph = helper.make_graph(
        nodes,
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, k])],
        outputs,
        [numpy_helper.from_array(a, name) for a, name in ((w, "w"), (v, "v"), (bias, "bias"))],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def per_row_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w as `quantize_int8` states it, in numpy: w in int8 with a scale per column, each row
    of x in int8 with its own scale s = max |row| / 127, the int8 product summed exactly."""
    w_scale = np.abs(w).max(axis=0) / np.float32(127)
    w_int = np.rint(w / w_scale).astype(np.int64)
    s = np.maximum(np.abs(x).max(axis=-1, keepdims=True) / np.float32(127), np.float32(2**-126))
    x_int = np.rint(x * (np.float32(1) / s)).astype(np.int64)
    assert np.abs(x_int).max() <= 127 and np.abs(w_int).max() <= 127
    return (x_int @ w_int).astype(np.float32) * s * w_scale


def test_int8_quantizes_each_row_on_its_own(tmp_path):
    """Rows of very different sizes in one batch: each is quantized with its own scale (one scale
    over the batch would round the small rows to zero), so a row's output is its own and equals
    the stated int8 arithmetic bit for bit; products of activations stay in float."""
    rng = np.random.default_rng(0)
    w, v = rng.standard_normal((2, 24, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    x = rng.standard_normal((3, 5, 24)).astype(np.float32)
    x *= np.float32(10.0) ** rng.integers(-4, 4, (3, 5, 1))  # row sizes from 1e-4 to 1e3
    x[1, 2] = 0  # a row of zeros stays zero
    quantize_int8(linear_graph(tmp_path / "f.onnx", w, v, bias), tmp_path / "q.onnx")
    session = ort.InferenceSession(tmp_path / "q.onnx", providers=["CPUExecutionProvider"])
    y, z, gram = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, per_row_reference(x, w) + bias)
    np.testing.assert_array_equal(z, per_row_reference(x, v))
    np.testing.assert_allclose(gram, x @ x.transpose(0, 2, 1), rtol=1e-5)
    for b in range(3):  # one sentence alone: the same bits
        np.testing.assert_array_equal(session.run(None, {"x": x[b : b + 1]})[0], y[b : b + 1])
    # the independent answer: within int8's error of each row's own float product
    exact = x.astype(np.float64) @ w + bias
    size = np.abs(x).max(-1, keepdims=True) * np.abs(w).sum(0)
    assert (np.abs(y - exact) <= 0.02 * size).all()
    ops = [node.op_type for node in onnx.load(tmp_path / "q.onnx").graph.node]
    assert ops.count("MatMulInteger") == 2 and ops.count("QuantizeLinear") == 1
    assert "DynamicQuantizeLinear" not in ops and ops.count("MatMul") == 1
