"""Depth-aware encoders: the encoder computes and stores only the layers up to the deepest hidden
state its combiner reads (or the first K with `encoder_layers`), with exactly the emissions of
the full encoder read at the same states; checkpoints shrink in proportion, exports hold only
those layers, and checkpoints that stored the unread layers still load."""

from __future__ import annotations

import onnx
import pytest
import torch
from helpers import ROOT, run_ner

from ner.inference.export import export_onnx, sample_batch
from ner.layer_analysis.embed import WordStates, iter_word_states
from ner.model.tagger import NERTagger, load_tagger
from ner.modules.combiners import ConcatLayers, LastLayer, ScalarMix, SingleLayer
from ner.modules.encoder import depth, hidden_states, load_encoder
from ner.modules.heads import LinearHead

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def tagger(model_dir, combiner, **kwargs) -> NERTagger:
    torch.manual_seed(0)
    head = LinearHead(dropout=0.0)
    return NERTagger(encoder=str(model_dir), labels=LABELS, combiner=combiner, head=head,
                     word_features=None, **kwargs).eval()  # fmt: skip


def by_the_full_encoder(model: NERTagger, model_dir, batch, states: list[int]) -> torch.Tensor:
    """The emissions `model`'s head gives the pooled states `states` of the untruncated
    encoder: what the model must compute without the layers above them."""
    full = load_encoder(str(model_dir)).eval()
    hidden = hidden_states(full, batch["input_ids"], batch["attention_mask"])
    pieces = model.combiner(list(hidden), batch["attention_mask"])
    assert all(hidden[k] is not None for k in states)
    return model.head(model.pooling.words(pieces, batch), batch["word_mask"])


@pytest.mark.parametrize(
    ("combiner", "computed"),
    [(SingleLayer(1), 1), (SingleLayer(-2), 2), (ConcatLayers([0, 1]), 1), (LastLayer(), 3),
     (ScalarMix([0, 2]), 2), (SingleLayer(0), 0)],
)  # fmt: skip
def test_the_encoder_computes_up_to_the_deepest_state_read(tiny_model_dir, combiner, computed):
    model = tagger(tiny_model_dir, combiner)
    assert depth(model.encoder) == computed and model.encoder.config.num_hidden_layers == 3
    batch = sample_batch(model)
    with torch.no_grad():
        got = model(batch)
        want = by_the_full_encoder(model, tiny_model_dir, batch, combiner.layer_indices(3))
    assert torch.equal(got, want)  # the same operations on the same numbers: exact in fp32


def test_encoder_layers_makes_a_shallower_encoder(tiny_model_dir):
    """`encoder_layers=2`: a 2-layer encoder, whose last layer (LastLayer) is layer 2."""
    model = tagger(tiny_model_dir, LastLayer(), encoder_layers=2)
    assert model.encoder.config.num_hidden_layers == 2 and depth(model.encoder) == 2
    batch = sample_batch(model)
    with torch.no_grad():
        got = model(batch)
        full = tagger(tiny_model_dir, SingleLayer(2))  # the same weights: the same seed
        full.head.load_state_dict(model.head.state_dict())
        want = full(batch)
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="encoder_layers: 4 layers: the encoder has 0..3"):
        tagger(tiny_model_dir, LastLayer(), encoder_layers=4)


def fit(model_dir, corpus_dir, capsys, run: str, *options: str):
    argv = ["fit", "-c", str(ROOT / "configs" / "trainer.yaml"), "--model.encoder",
            str(model_dir), "--data.data_dir", str(corpus_dir), "--trainer.max_steps", "2",
            "--run", run, "--model.word_features", "null", *options]  # fmt: skip
    code, _, err = run_ner(argv, capsys)
    assert code == 0, err
    return torch.load(f"checkpoints/{run}/best.ckpt", weights_only=True)


def tensor_bytes(state: dict) -> int:
    return sum(t.numel() * t.element_size() for t in state["state_dict"].values())


def test_a_truncated_checkpoint_holds_only_its_layers(tiny_model_dir, tiny_corpus_dir, capsys):
    full = fit(tiny_model_dir, tiny_corpus_dir, capsys, "full")
    cut = fit(tiny_model_dir, tiny_corpus_dir, capsys, "cut", "--model.combiner",
              "ner.modules.combiners.SingleLayer", "--model.combiner.layer", "1")  # fmt: skip
    layer = load_encoder(str(tiny_model_dir)).encoder.layer[0]
    one_layer = sum(p.numel() * p.element_size() for p in layer.parameters())
    assert tensor_bytes(full) - tensor_bytes(cut) == 2 * one_layer  # layers 2 and 3 are gone
    assert not any(".layer.1." in k or ".layer.2." in k for k in cut["state_dict"])
    reloaded = load_tagger("checkpoints/cut/best.ckpt")
    assert depth(reloaded.encoder) == 1 and reloaded.combiner.layer == 1


def test_the_export_of_a_truncated_model_holds_only_its_layers(tiny_model_dir, tmp_path):
    model = tagger(tiny_model_dir, SingleLayer(1))
    export_onnx(model, tmp_path / "exp", int8=False)
    names = {i.name for i in onnx.load(str(tmp_path / "exp" / "model.onnx")).graph.initializer}
    assert any("layer.0." in n for n in names)
    assert not any("layer.1." in n or "layer.2." in n for n in names)


def test_a_checkpoint_that_stored_unread_layers_still_loads(tiny_model_dir, tmp_path):
    """Before depth-aware encoders a model reading layer 2 of 3 stored layer 3 too."""
    model = tagger(tiny_model_dir, LastLayer())
    state = {"state_dict": model.state_dict(), "ner": None}
    from ner.model import checkpoint

    state["ner"] = checkpoint.pack(model)
    state["ner"]["modules"]["combiner"] = {"class_path": "ner.combiners.SingleLayer",
                                           "init_args": {"layer": -2}}  # fmt: skip
    torch.save(state, tmp_path / "old.ckpt")
    loaded = load_tagger(tmp_path / "old.ckpt")
    assert depth(loaded.encoder) == 2
    batch = sample_batch(loaded)
    with torch.no_grad():
        got = loaded(batch)
        want = by_the_full_encoder(loaded, tiny_model_dir, batch, [2])
    assert torch.equal(got, want)


def test_embed_computes_only_up_to_the_deepest_layer_asked(tiny_model_dir, tmp_path, capsys):
    full = WordStates.of_encoder(str(tiny_model_dir))
    sentence = [["john", "visited", "paris"]]
    want = next(iter_word_states(full, sentence, layers=[0, 1]))[0]
    words = WordStates.of_encoder(str(tiny_model_dir)).computing_up_to(1)
    ran = []
    for i, layer in enumerate(words.encoder.encoder.layer):
        layer.register_forward_hook(lambda *_, i=i: ran.append(i))
    got = next(iter_word_states(words, sentence, layers=[0, 1]))[0]
    assert ran == [0] and depth(words.encoder) == 1  # layer 1 only
    assert (got == want).all()
    text = tmp_path / "in.txt"
    text.write_text("john visited paris\n")
    argv = ["embed", str(text), "--encoder", str(tiny_model_dir), "--layers", "0,1",
            "--output", str(tmp_path / "e")]  # fmt: skip
    code, _, err = run_ner(argv, capsys)
    assert code == 0, err
