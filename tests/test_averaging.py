"""EMAWeights: the average against a numpy recurrence, and `best.ckpt` holding the very weights
whose `val/f1` chose it (Lightning's own callback leaves the raw ones in weights-only files)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import fit_config, tiny_sentences, write_tiny_corpus
from pytorch_lightning.callbacks import Callback
from seqeval.metrics import f1_score
from torch.optim.swa_utils import AveragedModel

from ner.cli.lightning import run_lightning
from ner.corpus.reader import read_conll
from ner.inference.routine import iter_tags
from ner.model.averaging import ema_update
from ner.model.tagger import load_tagger

EMA = "--trainer.callbacks+=ner.model.averaging.EMAWeights"
FP32 = ["--trainer.precision", "32-true"]


def numpy_ema(trajectory: list[np.ndarray], decay: float, warmup: int) -> np.ndarray:
    average = trajectory[0].astype(np.float64)
    for n, weights in enumerate(trajectory[1:], start=1):
        rate = min(decay, (1 + n) / (warmup + n))
        average = rate * average + (1 - rate) * weights
    return average


def test_ema_update_matches_the_warmed_up_recurrence():
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2)
    averaged = AveragedModel(layer, avg_fn=lambda a, c, n: ema_update(a, c, n, 0.9, 4))
    trajectory = []
    for _ in range(12):
        with torch.no_grad():
            layer.weight.add_(torch.randn_like(layer.weight))
        trajectory.append(layer.weight.detach().numpy().copy())
        averaged.update_parameters(layer)
    expected = numpy_ema(trajectory, decay=0.9, warmup=4)
    np.testing.assert_allclose(averaged.module.weight.detach().numpy(), expected, atol=1e-5)
    assert not np.allclose(expected, trajectory[-1], atol=1e-2)  # the average lags the weights


def test_integer_buffers_are_copied_not_averaged():
    ids = torch.arange(5)
    assert torch.equal(ema_update(ids, ids + 1, torch.tensor(3), 0.9, 4), ids + 1)


class RecordWeights(Callback):
    """The raw weights after every optimizer step, and (step, val/f1) after every validation."""

    def __init__(self):
        self.steps: list[dict[str, torch.Tensor]] = []
        self.validations: list[tuple[int, float]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps.append({k: v.detach().clone() for k, v in pl_module.state_dict().items()})

    def on_validation_end(self, trainer, pl_module) -> None:
        f1 = float(trainer.callback_metrics["val/f1"])
        self.validations.append((trainer.global_step, f1))


class StopAfterOneEpoch(Callback):
    """Ends a fit after its first epoch, its schedule still set for all of them."""

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        trainer.should_stop = True


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("ema")
    corpus = tmp / "corpus"  # dev unlike train, so that F1 stays under 1
    corpus.mkdir()
    write_tiny_corpus(corpus / "train.txt", tiny_sentences(20, seed=1))
    for name in ("dev.txt", "test.txt"):
        write_tiny_corpus(corpus / name, tiny_sentences(20, seed=2))
    config = fit_config(tmp, tiny_model_dir, corpus)
    cli = run_lightning(
        ["fit", "-c", str(config), EMA, "--trainer.callbacks+=test_averaging.RecordWeights",
         "--trainer.max_steps", "40", "--trainer.check_val_every_n_epoch", "1", *FP32]
    )  # fmt: skip
    record = next(c for c in cli.trainer.callbacks if isinstance(c, RecordWeights))
    return {"tmp": tmp, "record": record, "model": cli.model, "corpus": corpus}


def expected_average(record: RecordWeights, step: int, name: str) -> np.ndarray:
    trajectory = [weights[name].numpy() for weights in record.steps[:step]]
    return numpy_ema(trajectory, decay=0.998, warmup=10)


def test_best_ckpt_holds_the_average_that_was_validated(ema_run):
    record = ema_run["record"]
    best = torch.load(ema_run["tmp"] / "ckpt" / "best.ckpt", weights_only=True)
    step = best["global_step"]
    chosen = max(record.validations, key=lambda v: v[1])  # the first of equal scores, as Lightning
    assert step == chosen[0]
    name = "encoder.encoder.layer.0.attention.self.query.weight"
    assert name in best["state_dict"]
    expected = expected_average(record, step, name)
    np.testing.assert_allclose(best["state_dict"][name].numpy(), expected, atol=1e-6)
    raw = record.steps[step - 1][name].numpy()
    assert np.abs(raw - expected).max() > 1e-3  # the raw weights would fail the check above


def test_val_f1_is_seqeval_on_best_ckpt_tags(ema_run):
    record = ema_run["record"]
    corpus = read_conll(str(ema_run["corpus"] / "dev.txt"))
    words = [s.words for s in corpus.sentences]
    tagger = load_tagger(ema_run["tmp"] / "ckpt" / "best.ckpt")
    tagged = iter_tags(tagger, words, doc_ids=corpus.doc_ids, bf16=False)
    f1 = f1_score([s.tags for s in corpus.sentences], [tags for tags, _ in tagged])
    assert 0 < f1 < 1  # a score the two could disagree on
    assert f1 == pytest.approx(max(v[1] for v in record.validations), abs=1e-6)


def test_fit_leaves_the_average_and_last_ckpt_keeps_both(ema_run):
    record, model = ema_run["record"], ema_run["model"]
    name = "head.classifier.weight"
    assert name in record.steps[-1]
    steps = len(record.steps)
    expected = expected_average(record, steps, name)
    np.testing.assert_allclose(model.state_dict()[name].numpy(), expected, atol=1e-6)
    last = torch.load(ema_run["tmp"] / "ckpt" / "last.ckpt", weights_only=False)
    at = last["global_step"]
    np.testing.assert_allclose(
        last["state_dict"][name].numpy(), expected_average(record, at, name), atol=1e-6
    )
    assert torch.equal(last["current_model_state"][name], record.steps[at - 1][name])
    assert int(last["averaging_state"]["n_averaged"]) == at


def test_resumed_fit_ends_as_the_uninterrupted_one(tmp_path, tiny_model_dir, tiny_corpus_dir):
    def fit(directory, *extra):
        directory.mkdir()
        config = fit_config(directory, tiny_model_dir, tiny_corpus_dir)
        return run_lightning(
            ["fit", "-c", str(config), EMA, "--trainer.callbacks+=ner.model.resume.ResumeState",
             "--trainer.max_steps", "-1", "--trainer.max_epochs", "2",
             "--trainer.check_val_every_n_epoch", "1", *FP32, *extra]
        )  # fmt: skip

    whole = fit(tmp_path / "whole").model.state_dict()
    fit(tmp_path / "cut", "--trainer.callbacks+=test_averaging.StopAfterOneEpoch")
    last = tmp_path / "cut" / "ckpt" / "last.ckpt"
    resumed = fit(tmp_path / "resumed", "--ckpt_path", str(last))
    got = resumed.model.state_dict()
    for name, value in whole.items():
        assert torch.equal(value, got[name]), name
