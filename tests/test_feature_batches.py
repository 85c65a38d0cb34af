"""Batches served from the feature cache (`ner.data.feature_batches`): the same batches as `collate`
over whole shuffled epochs, the stored states as re-encoding gives them, resume and DDP shards."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import Logged, frozen_tagger, make_data

from ner.data.batching import move_batch
from ner.data.feature_batches import FeatureBatches, expand
from ner.data.feature_cache import FeatureCache
from ner.data.word_inputs import ragged
from ner.modules.combiners import ScalarMix
from ner.modules.word_features import WordFeatures


@pytest.fixture
def setup(tiny_model_dir, tiny_corpus_dir, tmp_path):
    """(data module, frozen scalar-mix tagger with casing and character features, its store);
    max_length 10 cuts the longer sentences into several windows."""
    data = make_data(tiny_model_dir, tiny_corpus_dir, tmp_path, max_length=10, stride=4)
    chars = WordFeatures(casing_dim=4, char_dim=4, char_filters=3)
    tagger = frozen_tagger(tiny_model_dir, data.labels, ScalarMix(), word_features=chars).eval()
    data.use_model(tagger)
    data.setup("fit")
    assert max(len(w) for w in data.datasets["train"]["input_ids"]) > 1
    cache = FeatureCache(tagger.encoder, list(range(4)), log=Logged())
    store = cache.store(data.datasets["train"], tmp_path / "features")
    return data, tagger, cache, store


def by_hand(store, sentences: list[int]) -> np.ndarray:
    """`[K, R, P, H]` of some sentences' windows, copied window by window from the store."""
    windows = [w for s in sentences for w in store.sentence(s)]
    longest = max(len(w[0]) for w in windows)
    out = np.zeros((len(store.layers), len(windows), longest, store.arrays[0].shape[1]))
    for r, window in enumerate(windows):
        for k, states in enumerate(window):
            out[k, r, : len(states)] = states
    return out.astype(np.float16)


def epoch(data, number: int) -> list[dict]:
    loader = data.train_dataloader()
    loader.batch_sampler.set_epoch(number)
    return list(loader)


def test_a_shuffled_epoch_gives_collates_batches_and_re_encodings_emissions(setup):
    data, tagger, cache, store = setup
    seen = []
    for number in (0, 1):
        computed = epoch(data, number)  # collate: re-encoded by the frozen encoder
        data.use_feature_cache(cache)
        cached = epoch(data, number)
        data.feature_cache = None
        assert len(cached) == len(computed) == 5
        for plain, stored in zip(computed, cached, strict=True):
            assert set(stored) == set(plain) - {"input_ids"} | {"features", "feature_layers"}
            for key in plain.keys() - {"input_ids"}:
                assert stored[key].dtype == plain[key].dtype, key
                assert torch.equal(stored[key], plain[key]), key
            sentences = stored["sent_id"].tolist()  # sent_id = row here
            np.testing.assert_array_equal(stored["features"].numpy(), by_hand(store, sentences))
            with torch.no_grad():
                np.testing.assert_allclose(tagger(stored), tagger(plain), rtol=2e-2, atol=2e-2)
        seen.append([sorted(b["sent_id"].tolist()) for b in cached])
    assert sorted(map(tuple, seen[0])) != sorted(map(tuple, seen[1]))  # membership reshuffled


def test_resume_mid_epoch_yields_the_remaining_cached_batches(setup):
    data, _, cache, _ = setup
    data.use_feature_cache(cache)
    full = epoch(data, 2)
    first = data.train_dataloader()
    first.batch_sampler.set_epoch(2)
    it = iter(first)
    seen = [next(it) for _ in range(2)]
    state = first.state_dict()
    assert state == {"epoch": 2, "consumed": 2}
    resumed = data.train_dataloader()  # a new run: new loader, new dataset object
    resumed.load_state_dict(state)
    resumed.batch_sampler.set_epoch(2)
    rest = list(resumed)
    assert len(seen) + len(rest) == len(full)
    for got, expected in zip(seen + rest, full, strict=True):
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            assert value == got[key] if key == "feature_layers" else torch.equal(value, got[key])


def test_a_worker_serves_the_same_batches(setup):
    data, _, cache, _ = setup
    data.use_feature_cache(cache)
    here = list(data.val_dataloader())
    data.num_workers = 1  # the store reopens its maps in the worker
    there = list(data.val_dataloader())
    assert [b["sent_id"].tolist() for b in there] == [b["sent_id"].tolist() for b in here]
    for a, b in zip(here, there, strict=True):
        assert torch.equal(a["features"], b["features"])


def test_ddp_ranks_get_the_samplers_shards(setup, monkeypatch):
    data, _, cache, _ = setup
    data.use_feature_cache(cache)
    data.val_dataloader()  # the store is opened before: encoding would wait at a barrier
    shards = []
    for rank in (0, 1, 2):
        monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.distributed, "get_rank", lambda rank=rank: rank)
        monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 3)
        loader = data.val_dataloader()
        expected = list(loader.batch_sampler)
        shards.append([b["sent_id"].tolist() for b in loader])
        assert shards[-1] == expected  # the sampler's batches, in its order
    assert len({len(s) for s in shards}) == 1  # 5 batches padded to 6: 2 a rank
    assert {i for s in shards for b in s for i in b} == set(range(20))


def test_a_store_of_other_windows_is_refused(setup, tiny_model_dir, tiny_corpus_dir, tmp_path):
    _, _, _, store = setup
    other = make_data(tiny_model_dir, tiny_corpus_dir, tmp_path / "other", max_length=16)
    other.setup("fit")
    with pytest.raises(ValueError, match="does not hold"):
        FeatureBatches(other.datasets["train"], store)


def test_ragged_and_expand():
    pos, valid = ragged(np.array([3, 10]), np.array([2, 0]), 3)
    assert pos.tolist() == [[3, 4, 0], [0, 0, 0]]
    assert valid.tolist() == [[True, True, False], [False, False, False]]
    items, run = expand(np.array([5, 0, 8]), np.array([2, 0, 3]))
    assert items.tolist() == [5, 6, 8, 9, 10] and run.tolist() == [0, 0, 2, 2, 2]


def test_move_batch_moves_flat_batches_and_leaves_others_to_lightning():
    batch = {"a": torch.ones(2), "feature_layers": (0, 3)}
    moved = move_batch(batch, torch.device("cpu"))
    assert moved["a"] is batch["a"] and moved["feature_layers"] == (0, 3)
    nested = {"a": [torch.ones(2)]}
    assert torch.equal(move_batch(nested, torch.device("cpu"))["a"][0], torch.ones(2))


def test_word_table_matches_the_per_word_definitions():
    """`WordTable` (vectorised, once per distinct word) against `shape_ids`/`byte_ids` word by
    word: empty words, multi-byte and unpaired-surrogate text, words past MAX_BYTES, repeats."""
    from ner.corpus.shapes import MAX_BYTES, byte_ids, shape_ids
    from ner.data.word_inputs import WordTable, batch_word_inputs

    words = ["Paris", "", "é\u200b", "x" * (MAX_BYTES + 5), "\ud800", "Paris", "1,000", "—"]
    table = WordTable(words, ("word_shape", "word_chars"))
    assert table.shapes.tolist() == shape_ids(words)
    for i, word in enumerate(words):
        ids = byte_ids(word)
        assert table.char_len[i] == len(ids)
        assert table.chars[i].tolist() == ids + [0] * (MAX_BYTES - len(ids))
    batch = batch_word_inputs([words[:3], words[3:]], 6, ("word_shape", "word_chars"))
    assert batch["word_shape"].tolist() == [
        shape_ids(words[:3]) + [0] * 3,
        shape_ids(words[3:]) + [0],
    ]
    assert batch["word_chars"].shape == (2, 6, MAX_BYTES)  # the longest word's ids
    assert batch["word_chars"][0, 1].tolist() == [0] * MAX_BYTES  # "" is all padding
    assert batch["word_chars"][1, 1, 0].item() == byte_ids("\ud800")[0]
