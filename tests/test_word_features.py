"""Word features: the casing classes, the byte ids, the embedding and character CNN, "auto"."""

from __future__ import annotations

import pytest
import torch
from helpers import write_tiny_vocab

from ner.corpus.shapes import SHAPES, byte_ids, shape_ids, word_shape
from ner.data.batching import collate
from ner.data.pretrained import is_uncased
from ner.model.tagger import NERTagger
from ner.modules.word_features import WordFeatures

# an independent table, written by hand
CASING = {
    "paris": "all_lower",
    "Paris": "initial_capital",
    "PARIS": "all_caps",
    "EU": "all_caps",
    "U.S.": "all_caps",
    "I": "all_caps",
    "McDonald": "mixed_case",
    "iPhone": "mixed_case",
    "1996": "numeric",
    "3.5": "numeric",
    "1,000": "numeric",
    "1996-08-22": "numeric",
    "50%": "numeric",
    "F-16": "has_digit",
    "2nd": "has_digit",
    ".": "punctuation",
    "--": "punctuation",
    "(": "punctuation",
    "\u201c": "punctuation",
    "\u5317\u4eac": "other",  # Beijing in Chinese: no case
    "Zürich": "initial_capital",
    "élan": "all_lower",
}


@pytest.mark.parametrize("word", sorted(CASING))
def test_casing_classes_of_a_fixed_word_list(word):
    assert word_shape(word) == CASING[word]


def test_shape_ids_index_the_class_list_and_zero_is_padding():
    assert SHAPES[0] == "padding"
    assert [SHAPES[i] for i in shape_ids(["Paris", "is", "1996"])] == [
        "initial_capital",
        "all_lower",
        "numeric",
    ]


def test_byte_ids_are_utf8_bytes_plus_one():
    assert byte_ids("ab") == [98, 99]
    assert byte_ids("é") == [0xC3 + 1, 0xA9 + 1]
    assert byte_ids("x" * 40) == [121] * 24  # cut at MAX_BYTES
    assert byte_ids("") == [0]


def rows(sentences):
    return [
        {"input_ids": [[2, 3]], "piece_word": [[-1, -1]], "ner_tags": [-100] * len(s), "tokens": s}
        for s in sentences
    ]


def test_collate_builds_the_word_inputs_and_pads_with_zero():
    batch = collate(rows([["Paris", "is"], ["EU"]]), word_inputs=("word_shape", "word_chars"))
    assert batch["word_shape"].tolist() == [
        [SHAPES.index("initial_capital"), SHAPES.index("all_lower")],
        [SHAPES.index("all_caps"), 0],
    ]
    assert batch["word_chars"].shape == (2, 2, 5)
    assert batch["word_chars"][0, 1].tolist() == [106, 116, 0, 0, 0]  # "is"
    assert batch["word_chars"][1, 1].tolist() == [0] * 5  # a padding word
    assert "word_shape" not in collate(rows([["a"]]))  # only what a model asks for


def test_casing_embedding_is_a_lookup_of_the_class():
    features = WordFeatures(casing_dim=4)
    batch = collate(rows([["Paris", "EU", "1996"]]), word_inputs=features.inputs)
    out = features(batch)
    assert out.shape == (1, 3, 4) and features.output_dim() == 4
    expected = features.casing.weight[
        [SHAPES.index(c) for c in ("initial_capital", "all_caps", "numeric")]
    ]
    torch.testing.assert_close(out[0], expected)


def test_character_features_do_not_depend_on_padding():
    torch.manual_seed(0)
    features = WordFeatures(casing_dim=0, char_dim=6, char_filters=5).eval()
    assert features.inputs == ("word_chars",) and features.output_dim() == 5
    alone = features(collate(rows([["Paris"]]), word_inputs=features.inputs))
    padded = features(
        collate(rows([["Paris"], ["Internationalisation", "x"]]), word_inputs=features.inputs)
    )
    torch.testing.assert_close(padded[0, 0], alone[0, 0])
    assert padded[0, 1].abs().sum() == 0  # the padding word
    # by hand: embed the 5 bytes, convolve (zero-padded by one each side), max over positions
    ids = torch.tensor([byte_ids("Paris")])
    conv = features.conv(features.chars(ids).transpose(1, 2))
    torch.testing.assert_close(alone[0, 0], conv[0].amax(-1))


def test_auto_word_features_follow_the_tokenizer_casing(tiny_model_dir, tmp_path):
    from transformers import BertTokenizer

    uncased = NERTagger(encoder=str(tiny_model_dir), labels=["O", "B-X", "I-X"])
    assert is_uncased(uncased.tokenizer) and isinstance(uncased.word_features, WordFeatures)
    assert uncased.word_inputs == ("word_shape",)
    cased_dir = tmp_path / "cased"
    cased_dir.mkdir()
    for name in ("config.json", "model.safetensors"):
        (cased_dir / name).write_bytes((tiny_model_dir / name).read_bytes())
    BertTokenizer(str(write_tiny_vocab(cased_dir)), do_lower_case=False).save_pretrained(cased_dir)
    cased = NERTagger(encoder=str(cased_dir), labels=["O", "B-X", "I-X"])
    assert not is_uncased(cased.tokenizer) and cased.word_features is None
    off = NERTagger(encoder=str(tiny_model_dir), labels=["O", "B-X", "I-X"], word_features=None)
    assert off.word_features is None and off.head.classifier.in_features == 16
