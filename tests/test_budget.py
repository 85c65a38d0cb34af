"""`StepBudget`: small corpora get the epochs that make the step budget, large ones keep theirs,
and the learning-rate schedule spans the epochs actually run."""

from __future__ import annotations

import math
from pathlib import Path

import yaml
from helpers import fit_config

from ner.cli.lightning import run_lightning
from ner.corpus.reader import read_conll
from ner.model.budget import StepBudget

ROOT = Path(__file__).resolve().parents[1]


def test_epochs_for_the_budget_by_hand():
    budget = StepBudget(min_steps=1000, max_epochs=20)
    assert budget.epochs_for(439, 1, 3) == 3  # CoNLL-2003, 32 a batch: 1,317 steps already
    assert budget.epochs_for(63, 1, 3) == 16  # 2,000 sentences: ceil(1000 / 63)
    assert budget.epochs_for(10, 1, 3) == 20  # capped
    assert budget.epochs_for(63, 2, 3) == 20  # 31 steps an epoch with 2 batches a step
    assert budget.epochs_for(439, 1, 5) == 5  # never fewer epochs than asked for


def test_a_tiny_corpus_trains_the_budgeted_steps(tmp_path, tiny_model_dir, tiny_corpus_dir):
    config = fit_config(tmp_path, tiny_model_dir, tiny_corpus_dir)  # 20 sentences, 10 a batch
    budget = '{"class_path": "ner.model.budget.StepBudget", "init_args": {"min_steps": 7}}'
    cli = run_lightning(
        ["fit", "-c", str(config), "--trainer.max_steps", "-1", "--trainer.max_epochs", "1",
         f"--trainer.callbacks+={budget}", "--model.warmup_ratio", "0.5"]
    )  # fmt: skip
    trainer = cli.trainer
    assert trainer.max_epochs == 4  # ceil(7 / 2 batches an epoch)
    assert trainer.global_step == 8 and trainer.current_epoch == 4
    # the schedule was sized for the 8 steps: warm-up over 4, then down to 0 at the last
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.lr_lambdas[0](4) == 1.0 and scheduler.get_last_lr()[0] == 0.0


def test_a_fit_bounded_in_steps_keeps_its_bound(tmp_path, tiny_model_dir, tiny_corpus_dir):
    config = fit_config(tmp_path, tiny_model_dir, tiny_corpus_dir)
    budget = '{"class_path": "ner.model.budget.StepBudget", "init_args": {"min_steps": 50}}'
    cli = run_lightning(
        ["fit", "-c", str(config), "--trainer.max_steps", "3",
         f"--trainer.callbacks+={budget}"]
    )  # fmt: skip
    assert cli.trainer.global_step == 3


def test_the_shipped_budget_leaves_every_conll_recipe_its_epochs(conll_dir):
    """configs/trainer.yaml's budget is for small corpora: each CoNLL-2003 recipe already takes
    more steps (sentences / batch size, or packs / batch size for the packed recipe)."""
    trainer = yaml.safe_load((ROOT / "configs" / "trainer.yaml").read_text())["trainer"]
    (spec,) = [c for c in trainer["callbacks"] if c["class_path"].endswith("StepBudget")]
    budget = StepBudget(**spec["init_args"])
    assert budget.only_from == 3  # an explicit --trainer.max_epochs N other than 3 is kept
    sentences = len(read_conll(str(conll_dir / "eng.train")).sentences)
    assert sentences == 14041
    for name, batches, epochs in [
        ("default", math.ceil(sentences / 32), 3),
        ("quick", math.ceil(sentences / 32), 2),
        ("packed", math.ceil(sentences / 3.3 / 10), 3),
    ]:
        assert budget.epochs_for(batches, 1, epochs) == epochs, name
    assert budget.epochs_for(math.ceil(2000 / 32), 1, 3) == 13  # 2,000 tweets: 13 epochs
