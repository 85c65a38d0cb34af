"""`StepBudget`: a fit takes at least a number of optimizer steps, however small the corpus.

Epochs alone are the wrong unit for a default: three epochs of CoNLL-2003 are 1,317 steps of 32
sentences, three epochs of 2,000 tweets only 189, too few for the encoder to learn new types
(docs/results.md, "Small corpora"). The budget raises `max_epochs` before training starts, so
the learning-rate schedule (warm-up and decay over the estimated steps) spans the whole run, and
early stopping on dev still ends a run that stops improving.
"""

from __future__ import annotations

import math

from pytorch_lightning import Callback
from pytorch_lightning.utilities import rank_zero_info


class StepBudget(Callback):
    """Add epochs until a fit takes at least `min_steps` optimizer steps (at most `max_epochs`).

    Args:
        min_steps: the fewest optimizer steps of a fit (no epochs are added past it).
        max_epochs: the most epochs the budget may raise `trainer.max_epochs` to.
        only_from: raise only a fit of this many epochs (the config's own), so an epoch count
            asked for explicitly (`--trainer.max_epochs 1`) is kept; None: any fit.
    """

    def __init__(self, min_steps: int = 1000, max_epochs: int = 20, only_from: int | None = None):
        self.min_steps, self.max_epochs, self.only_from = min_steps, max_epochs, only_from
        self.epochs: int | None = None  # what this fit was given, once known

    def epochs_for(self, batches_per_epoch: int, accumulate: int, epochs: int) -> int:
        """The epochs a fit of `epochs` takes under the budget."""
        steps = max(1, batches_per_epoch // max(1, accumulate))
        return max(epochs, min(math.ceil(self.min_steps / steps), self.max_epochs))

    def setup(self, trainer, pl_module, stage: str) -> None:
        sampler = getattr(trainer.datamodule, "sampler", None)
        if stage != "fit" or trainer.max_steps != -1 or sampler is None:
            return  # a fit bounded in steps keeps its bound
        epochs = trainer.max_epochs if trainer.max_epochs is not None else 0
        if epochs < 0 or (self.only_from is not None and epochs != self.only_from):
            return  # no epoch limit at all, or epochs asked for explicitly
        batches = len(sampler("train"))
        self.epochs = self.epochs_for(batches, trainer.accumulate_grad_batches, epochs)
        if self.epochs > epochs:
            trainer.fit_loop.max_epochs = self.epochs
            rank_zero_info(
                f"step budget: {batches} batches an epoch, so {self.epochs} epochs instead of "
                f"{epochs} (at least {self.min_steps} steps; StepBudget)"
            )
