"""NERTagger: modes, optimiser groups, and that a tiny model really learns (overfits to F1 1.0)."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

from ner.data.datamodule import NERDataModule
from ner.model.tagger import NERTagger
from ner.modules.combiners import ScalarMix
from ner.modules.heads import LinearHead
from ner.utils.errors import NERError


def make_tagger(model_dir, labels, **kwargs) -> NERTagger:
    return NERTagger(encoder=str(model_dir), labels=labels, **kwargs)


def make_data(model_dir, corpus_dir, **kwargs) -> NERDataModule:
    return NERDataModule(data_dir=str(corpus_dir), tokenizer=str(model_dir), **kwargs)


def test_encoder_is_in_train_mode_and_frozen_encoder_is_not(tiny_model_dir):
    labels = ["O", "B-PER", "I-PER"]
    tagger = make_tagger(tiny_model_dir, labels)
    # from_pretrained returns eval mode; fine-tuning must run with dropout on.
    assert tagger.encoder.training
    frozen = make_tagger(tiny_model_dir, labels, freeze_encoder=True)
    frozen.train()
    assert not frozen.encoder.training and frozen.head.training
    assert not any(p.requires_grad for p in frozen.encoder.parameters())


def test_optimizer_groups_use_separate_learning_rates(tiny_model_dir):
    tagger = make_tagger(tiny_model_dir, ["O", "B-PER", "I-PER"], encoder_lr=1e-5, head_lr=1e-2)
    groups = tagger.optimizer().param_groups
    assert {g["lr"] for g in groups} == {1e-5, 1e-2}
    encoder_ids = {id(p) for p in tagger.encoder.parameters()}
    for group in groups:
        in_encoder = {id(p) in encoder_ids for p in group["params"]}
        assert in_encoder == {group["lr"] == 1e-5}
        assert group["weight_decay"] == (0.0 if group["params"][0].ndim < 2 else 0.01)
    n_params = sum(len(g["params"]) for g in groups)
    assert n_params == len([p for p in tagger.parameters() if p.requires_grad])


def test_labels_are_required(tiny_model_dir):
    with pytest.raises(NERError, match="labels"):
        NERTagger(encoder=str(tiny_model_dir), labels=None)


@pytest.mark.parametrize("combiner", [None, ScalarMix()], ids=["last", "scalar_mix"])
def test_tiny_model_overfits_twenty_sentences(tiny_model_dir, tiny_corpus_dir, combiner):
    pl.seed_everything(0)
    data = make_data(tiny_model_dir, tiny_corpus_dir, batch_size=10)
    tagger = make_tagger(
        tiny_model_dir,
        data.labels,
        combiner=combiner,
        head=LinearHead(dropout=0.0),
        encoder_lr=3e-3,
        head_lr=1e-2,
        warmup_ratio=0.0,
    )
    modes = []

    class RecordModes(pl.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            modes.append(module.encoder.training)

    trainer = pl.Trainer(
        callbacks=[RecordModes()],
        max_steps=120,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=5,  # validation in between must not leave the encoder in eval
    )
    trainer.fit(tagger, datamodule=data)
    # Fine-tuning really ran with the encoder in train mode (dropout on), every step.
    assert modes == [True] * 120
    [result] = trainer.test(tagger, datamodule=data, verbose=False)
    assert result["test/f1"] == pytest.approx(1.0)
    assert set(tagger.test_eval.predictions) == set(range(20))


def test_forward_shapes(tiny_model_dir, tiny_corpus_dir):
    data = make_data(tiny_model_dir, tiny_corpus_dir, batch_size=4)
    tagger = make_tagger(
        tiny_model_dir, ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    )
    data.use_model(tagger)  # its casing features need the words' shapes in every batch
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    assert batch["word_shape"].shape == batch["word_mask"].shape
    emissions = tagger(batch)
    assert emissions.shape == (*batch["word_mask"].shape, len(data.labels))
    assert torch.isfinite(emissions).all()


def test_predictions_do_not_depend_on_batching(tiny_model_dir):
    from ner.inference.routine import iter_tags

    tagger = make_tagger(tiny_model_dir, ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])
    sentences = [["john"] * n + ["visited", "paris"] for n in (5, 1, 9, 3, 1, 7, 2)]
    default = list(iter_tags(tagger, sentences))
    small = list(iter_tags(tagger, iter(sentences), batch_size=2, max_pieces=24, chunk_size=3))
    assert [tags for tags, _ in small] == [tags for tags, _ in default]
    assert [len(tags) for tags, _ in default] == [len(s) for s in sentences]  # input order
    for (_, a), (_, b) in zip(small, default, strict=True):
        assert a == pytest.approx(b, abs=1e-5)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_fit_clips_gradients_in_every_precision(tiny_model_dir, tiny_corpus_dir, precision):
    # regression: under bf16-mixed Lightning refused gradient clipping with the fused AdamW
    # ("does not allow for gradient clipping"), so the automatic precision broke `ner fit`
    data = make_data(tiny_model_dir, tiny_corpus_dir, batch_size=10)
    tagger = make_tagger(tiny_model_dir, data.labels)
    trainer = pl.Trainer(
        max_steps=2,
        precision=precision,
        gradient_clip_val=1.0,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = tagger.head.classifier.weight.detach().clone()
    trainer.fit(tagger, datamodule=data)
    assert trainer.global_step == 2
    assert not torch.equal(tagger.head.classifier.weight, start)
    [optimizer] = trainer.optimizers
    assert bool(optimizer.defaults["fused"]) is (precision == "32-true")
