"""Packed inference rows (ner.data.row_packing): the layout, the collated tensors, and the tags
and emissions of packed batches against plain length-sorted ones (tiny BERT and tiny MPNet)."""

from __future__ import annotations

import random

import pytest
import torch
from helpers import tiny_sentences
from tiny_mpnet import build_tiny_mpnet

from ner.data.row_packing import (
    collate_inference,
    collate_packed,
    inference_batches,
    pack_rows,
    packed_batches,
    rounded_rows,
)
from ner.inference.routine import can_pack, map_batches, warm_up
from ner.model.tagger import NERTagger
from ner.modules.combiners import ScalarMix
from ner.modules.encoder import position_start
from ner.modules.heads import LinearHead

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]


def test_every_window_lands_once_in_a_row_that_holds_it():
    rng = random.Random(0)
    lengths = [rng.randint(3, 64) for _ in range(500)]
    rows = pack_rows(lengths, 64, most=5)
    assert sorted(i for row in rows for i in row) == list(range(500))
    assert all(sum(lengths[i] for i in row) <= 64 and len(row) <= 5 for row in rows)
    # best fit decreasing is within 11/9 OPT + 1 rows, and OPT >= total / 64
    assert len(rows) <= 11 / 9 * (sum(lengths) / 64) + 2


def test_a_known_packing():
    # 40+24, 30+30+4, 10: three rows; longest first, each into the fullest row it fits
    assert pack_rows([10, 40, 30, 24, 30, 4], 64) == [[1, 3], [2, 4, 5], [0]]


def test_batches_take_few_shapes_and_respect_the_sentence_cap():
    assert [rounded_rows(n) for n in range(1, 10)] == [1, 2, 4, 4, 8, 8, 8, 8, 12]
    lengths = [20] * 100  # three a row: 34 rows
    batches = packed_batches(lengths, 64, 1024)
    assert [len(b) for b in batches] == [48, 48, 4]
    capped = packed_batches(lengths, 64, 1024, batch_size=10)
    assert all(len(b) <= 10 for b in capped)
    assert sorted(i for b in capped for i in b) == list(range(100))


def test_long_and_several_window_sentences_go_the_plain_way():
    lengths, windows = [10, 70, 12, 30, 64], [1, 1, 1, 2, 1]
    batches = inference_batches(lengths, windows, None, 1024, pack=True)
    assert batches == [[4, 2, 0], [3, 1]]  # packed rows [4], [2, 0] in one batch; then by length
    plain = inference_batches(lengths, windows, None, 1024, pack=False)
    assert plain == [[0, 2, 3, 4, 1]]


def _row(ids, pw, words):
    return {
        "input_ids": [ids],
        "piece_word": [pw],
        "ner_tags": [-100] * words,
        "tokens": ["w"] * words,
    }


def test_collate_packed_places_windows_with_their_own_positions():
    rows = [_row([2, 7, 8, 3], [-1, 0, 1, -1], 2), _row([2, 9, 3], [-1, 0, -1], 1)]
    batch = collate_packed(rows, [[1, 0]], pad_id=0, row_pieces=8)
    assert batch["input_ids"].tolist() == [[2, 9, 3, 2, 7, 8, 3, 0]]
    assert batch["segments"].tolist() == [[1, 1, 1, 2, 2, 2, 2, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 0]]
    # flat word index b * W + w, W = 2 words: sentence 1's word 0 is 2
    assert batch["piece_word"].tolist() == [[-1, 2, -1, -1, 0, 1, -1, -1]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 1, 1, 0]]
    assert batch["word_mask"].tolist() == [[True, True], [True, False]]
    three = collate_packed(rows, [[0], [1], []], row_pieces=8)
    assert three["input_ids"].shape == (4, 8)  # 3 rows round up to 4
    with pytest.raises(ValueError, match="do not fit"):
        collate_packed(rows, [[0, 1]], row_pieces=6)
    # the layout is a function of the rows alone; not packable: the plain collate
    assert collate_inference(rows, pack=True)["input_ids"].shape == (1, 16)  # 7 pieces
    assert "segments" not in collate_inference(rows, pack=False)


@pytest.fixture(scope="module")
def mpnet_dir(tmp_path_factory):
    return build_tiny_mpnet(tmp_path_factory.mktemp("mpnet"))


def _tagger(encoder, pooling="first", attention=None):
    torch.manual_seed(0)
    model = NERTagger(encoder=encoder, labels=LABELS, combiner=ScalarMix(), pooling=pooling,
                      head=LinearHead(crf=True))  # fmt: skip
    if attention:
        model.encoder.config._attn_implementation = attention
    return model.eval()


def _emissions(model, sentences, **kwargs):
    def run(batch):
        emissions = model(batch).float()  # [B, W, labels]
        return [e[:n] for e, n in zip(emissions, batch["word_mask"].sum(1).tolist(), strict=True)]

    return list(map_batches(model, run, sentences, **kwargs))


def _sentences():
    sentences = [[w for w, _ in s] for s in tiny_sentences(60, seed=3)]
    sentences[7] = sentences[7] * 12  # longer than a packed row: the plain path
    return sentences


@pytest.mark.parametrize("pooling", ["first", "mean", "first_last"])
@pytest.mark.parametrize("encoder", ["bert", "mpnet"])
def test_packed_batches_tag_as_plain_ones(encoder, pooling, tiny_model_dir, mpnet_dir):
    model = _tagger(str(tiny_model_dir if encoder == "bert" else mpnet_dir), pooling)
    assert can_pack(model)
    sentences = _sentences()
    plain = _emissions(model, sentences, packed=False)
    for kwargs in ({}, {"batch_size": 5}, {"max_pieces": 128}):
        packed = _emissions(model, sentences, packed=True, **kwargs)
        for a, b in zip(plain, packed, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_eager_attention_packs_as_sdpa(tiny_model_dir):
    sentences = _sentences()
    sdpa = _emissions(_tagger(str(tiny_model_dir)), sentences, packed=True)
    eager = _emissions(_tagger(str(tiny_model_dir), attention="eager"), sentences, packed=True)
    for a, b in zip(sdpa, eager, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_position_start_is_found_by_trying(tiny_model_dir, mpnet_dir):
    assert position_start(_tagger(str(tiny_model_dir)).encoder) == 0
    mpnet = _tagger(str(mpnet_dir)).encoder
    assert position_start(mpnet) == mpnet.config.pad_token_id + 1


def test_a_model_with_a_runtime_is_not_packed(tiny_model_dir):
    model = _tagger(str(tiny_model_dir))
    model.runtime = lambda batch: None
    assert not can_pack(model)
    with pytest.raises(ValueError, match="cannot be packed"):
        list(map_batches(model, lambda b: [], [["a"]], packed=True))


def test_document_context_and_word_features_pack_as_plain(tiny_model_dir):
    model = _tagger(str(tiny_model_dir))
    assert model.word_features is not None  # casing and characters: per-word batch inputs
    sentences = _sentences()
    docs = [i // 6 for i in range(len(sentences))]
    settings = model.window_settings.overridden(context_pieces=6)
    plain = _emissions(model, sentences, doc_ids=docs, settings=settings, packed=False)
    packed = _emissions(model, sentences, doc_ids=docs, settings=settings, packed=True)
    for a, b in zip(plain, packed, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_warm_up_runs_every_packed_shape(tiny_model_dir, monkeypatch):
    model = _tagger(str(tiny_model_dir))
    shapes = []
    forward = type(model).forward

    def spy(self, batch):
        shapes.append(tuple(batch["input_ids"].shape))
        return forward(self, batch)

    monkeypatch.setattr(type(model), "forward", spy)
    assert warm_up(model, max_pieces=1024) == [1, 2, 4, 8, 12, 16]
    narrow = [(1, 16), (1, 32), (1, 48), (2, 48)]
    assert shapes == [(1, 64), (2, 64), (4, 64), (8, 64), (12, 64), (16, 64), *narrow]
    shapes.clear()
    assert warm_up(model, batch_size=6, max_pieces=1024) == [1, 2, 4, 8]
    assert shapes[3] == (8, 64)  # 6 rows, rounded up
