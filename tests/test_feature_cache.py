"""Frozen-encoder feature cache: stored values, keys, layer reuse, atomicity, training on it."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from helpers import Logged, frozen_tagger, make_data, trainer

from ner.data.feature_cache import FeatureCache, FeatureStore
from ner.model.tagger import NERTagger
from ner.modules.combiners import ConcatLayers, LastLayer, ScalarMix, SingleLayer


def test_stored_states_equal_the_encoder_output(tiny_model_dir, tiny_corpus_dir, tmp_path):
    # max_length 10 splits the longer sentences into several windows
    data = make_data(tiny_model_dir, tiny_corpus_dir, tmp_path, max_length=10, stride=4)
    data.setup("fit")
    train = data.datasets["train"]
    assert max(len(w) for w in train["input_ids"]) > 1
    tagger = frozen_tagger(tiny_model_dir, data.labels)
    store = FeatureCache(tagger.encoder, [0, 3], log=Logged()).store(train, tmp_path / "f")
    assert [a.dtype for a in store.arrays] == [np.float16, np.float16]
    for index in range(len(train)):
        windows = train[index]["input_ids"]
        stored = store.sentence(index)
        assert len(stored) == len(windows)
        for ids, features in zip(windows, stored, strict=True):
            with torch.no_grad():
                out = tagger.encoder(torch.tensor([ids]), output_hidden_states=True)
            assert len(features) == 2  # layers 0 and 3
            for k, layer in enumerate([0, 3]):
                expected = out.hidden_states[layer][0].numpy()
                assert features[k].shape == expected.shape
                np.testing.assert_allclose(features[k], expected, rtol=2e-3, atol=2e-3)


def test_key_follows_weights_and_windows_and_layers_are_reused(
    tiny_model_dir, tiny_corpus_dir, tmp_path
):
    data = make_data(tiny_model_dir, tiny_corpus_dir, tmp_path)
    data.setup("fit")
    train, val = data.datasets["train"], data.datasets["val"]
    tagger = frozen_tagger(tiny_model_dir, data.labels)
    root = tmp_path / "f"
    log = Logged()
    first = FeatureCache(tagger.encoder, [3], log=log).store(train, root)
    again = FeatureCache(tagger.encoder, [3], log=log).store(train, root)
    assert again.directory == first.directory and len(log) == 1  # read back, not re-encoded
    # the same windows (dev = train here) share the folder; a wider combiner encodes only layer 2
    wider = FeatureCache(tagger.encoder, [2, 3], log=log).store(val, root)
    assert wider.directory == first.directory and len(log) == 2 and "layers [2]" in log[-1]
    other = make_data(tiny_model_dir, tiny_corpus_dir, tmp_path / "other", max_length=10)
    other.setup("fit")
    windows = FeatureCache(tagger.encoder, [3], log=log).store(other.datasets["train"], root)
    assert windows.directory != first.directory
    with torch.no_grad():
        tagger.encoder.embeddings.word_embeddings.weight[5] += 1.0
    weights = FeatureCache(tagger.encoder, [3], log=log).store(train, root)
    assert weights.directory not in (first.directory, windows.directory)
    assert len(log) == 4


def test_a_failed_encoding_pass_leaves_no_layer_file(tiny_model_dir, tiny_corpus_dir, tmp_path):
    data = make_data(tiny_model_dir, tiny_corpus_dir, tmp_path)
    data.setup("fit")
    tagger = frozen_tagger(tiny_model_dir, data.labels)
    calls = []

    def fail_on_second(module, args, kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    handle = tagger.encoder.register_forward_pre_hook(fail_on_second, with_kwargs=True)
    cache = FeatureCache(tagger.encoder, [3], max_pieces=64, log=Logged())
    with pytest.raises(KeyboardInterrupt):
        cache.store(data.datasets["train"], tmp_path / "f")
    handle.remove()
    [folder] = (tmp_path / "f").iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["first_window.npy", "offsets.npy"]
    assert tagger.encoder.training is False  # frozen: restored to what it was
    store = cache.store(data.datasets["train"], tmp_path / "f")  # the next run builds it
    assert (store.directory / "layer-3.npy").is_file()


def test_store_pickles_without_its_arrays(tiny_model_dir, tiny_corpus_dir, tmp_path):
    data = make_data(tiny_model_dir, tiny_corpus_dir, tmp_path)
    data.setup("fit")
    tagger = frozen_tagger(tiny_model_dir, data.labels)
    store = FeatureCache(tagger.encoder, [3], log=Logged()).store(data.datasets["train"], tmp_path)
    expected = store.sentence(7)
    copy = pickle.loads(pickle.dumps(store))  # what a DataLoader worker receives
    assert isinstance(copy, FeatureStore) and copy._arrays is None
    np.testing.assert_array_equal(copy.sentence(7)[0][0], expected[0][0])
    assert len(pickle.dumps(store)) < 10_000


def test_cached_batches_match_computed_ones(tiny_model_dir, tiny_corpus_dir, tmp_path):
    data = make_data(tiny_model_dir, tiny_corpus_dir, tmp_path, max_length=10, stride=4)
    tagger = frozen_tagger(tiny_model_dir, data.labels, combiner=ConcatLayers([-2, -1]))
    tagger.eval()
    # before setup: a model's other window settings would drop the tokenized splits again
    data.use_model(tagger)  # its casing features need the words' shapes in every batch
    data.setup("fit")
    computed = list(data.val_dataloader())
    data.use_feature_cache(FeatureCache(tagger.encoder, [2, 3], log=Logged()))
    cached = list(data.val_dataloader())
    assert len(cached) == len(computed) == 5
    for plain, stored in zip(computed, cached, strict=True):
        assert stored["features"].shape[:3] == (2, *plain["input_ids"].shape)
        assert stored["feature_layers"] == (2, 3)
        # padding pieces hold zeros
        pad = plain["attention_mask"] == 0
        assert pad.any() or plain["attention_mask"].shape[0] == 1
        assert not stored["features"][:, pad].any()
        with torch.no_grad():
            np.testing.assert_allclose(tagger(stored), tagger(plain), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    "combiner", [LastLayer(), SingleLayer(-2), ScalarMix()], ids=["last", "single", "mix"]
)
def test_training_on_the_cache_encodes_once_and_matches_recomputing(
    tiny_model_dir, tiny_corpus_dir, tmp_path, combiner
):
    def fit(cache_features: bool, mix):
        pl.seed_everything(0)
        data = make_data(tiny_model_dir, tiny_corpus_dir, tmp_path)
        tagger = frozen_tagger(tiny_model_dir, data.labels, mix, cache_features=cache_features)
        start = tagger.head.classifier.weight.detach().clone()
        calls = []
        tagger.encoder.register_forward_hook(lambda *_: calls.append(1))
        trainer(max_epochs=3).fit(tagger, datamodule=data)
        assert not torch.equal(tagger.head.classifier.weight, start)  # it did train
        head = torch.cat([p.detach().flatten() for p in tagger.head.parameters()])
        return head, len(calls), data

    plain_head, plain_calls, _ = fit(False, copy.deepcopy(combiner))
    cached_head, cached_calls, data = fit(True, copy.deepcopy(combiner))
    train_batches, val_batches = 5, 5  # 20 sentences, batch 4; dev = the same 20
    assert plain_calls == 3 * (train_batches + val_batches)
    # one encoding pass (a single batch) for train; dev has the same windows, so the same folder
    assert cached_calls == 1
    assert set(data._feature_stores) == {"train", "val"}
    # the same training up to float16 rounding of the features
    np.testing.assert_allclose(cached_head, plain_head, rtol=0, atol=5e-3)


def test_fine_tuning_never_uses_the_cache(tiny_model_dir, tiny_corpus_dir, tmp_path):
    data = make_data(tiny_model_dir, tiny_corpus_dir, tmp_path)
    tagger = NERTagger(encoder=str(tiny_model_dir), labels=data.labels)
    trainer(max_steps=1, limit_val_batches=0).fit(tagger, datamodule=data)
    assert data.feature_cache is None and not (tmp_path / "features").exists()


def test_cli_fit_with_a_frozen_encoder_fills_and_reuses_the_cache(
    tiny_model_dir, tiny_corpus_dir, tmp_path
):
    from helpers import fit_config

    from ner.cli.lightning import run_lightning

    cache = tmp_path / "cache"
    config = fit_config(tmp_path, tiny_model_dir, tiny_corpus_dir)
    overrides = ["--model.freeze_encoder", "true", "--data.cache_dir", str(cache)]
    # 2 steps an epoch, validation every 4th epoch: 8 steps see the dev set once
    cli = run_lightning(["fit", "-c", str(config), *overrides, "--trainer.max_steps", "8"])
    assert cli.model.freeze_encoder and set(cli.datamodule._feature_stores) == {"train", "val"}
    [folder] = (cache / "features").iterdir()  # train, dev and test hold the same 20 sentences
    assert sorted(p.name for p in folder.glob("layer-*")) == ["layer-3.npy"]
    stamp = (folder / "layer-3.npy").stat().st_mtime_ns
    ckpt = tmp_path / "ckpt" / "last.ckpt"
    data = ["--data.data_dir", str(tiny_corpus_dir), "--data.cache_dir", str(cache)]
    test = run_lightning(["test", "--ckpt_path", str(ckpt), *data])
    assert test.model.freeze_encoder and "test" in test.datamodule._feature_stores
    assert (folder / "layer-3.npy").stat().st_mtime_ns == stamp  # read back, not rewritten
    assert test.model.test_report["f1"] >= 0.0
