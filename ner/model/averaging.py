"""An exponential moving average of the weights, validated and shipped in place of the raw ones.

    ner fit -c configs/conll2003-minilm.yaml --trainer.callbacks+=ner.model.averaging.EMAWeights

Lightning's `WeightAveraging` swaps the average in for validation and back at the validation
epoch's end, and puts it into a checkpoint in `on_save_checkpoint`, which Lightning calls only
for full checkpoints. Our `best.ckpt` is weights-only, so it would hold the raw weights while
`val/f1`, which chose it, was measured on the average. Here the average stays in the module from
the start of validation until training takes its next step, so every checkpoint written in
between (`best.ckpt` included) holds the weights that were validated; full checkpoints keep the
raw weights under `current_model_state`, as Lightning's own do, so `--ckpt_path last` resumes
the same run.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from pytorch_lightning.callbacks import WeightAveraging


def ema_update(
    average: torch.Tensor,
    current: torch.Tensor,
    num_averaged: torch.Tensor,
    decay: float,
    warmup: int,
) -> torch.Tensor:
    """One EMA step with the decay warmed up as `(1 + n) / (warmup + n)`, capped at `decay`: the
    first updates follow the weights closely, so the average of a short run (a small corpus) is
    not anchored to the weights of its first steps."""
    if not average.is_floating_point():  # position ids and other integer buffers never change
        return current
    rate = torch.clamp((1 + num_averaged) / (warmup + num_averaged), max=decay)
    rate = rate.to(average.dtype)
    return rate * average + (1 - rate) * current


class EMAWeights(WeightAveraging):
    """Keeps an exponential moving average of every weight, updated after each optimizer step;
    validation, checkpoints and the model left after `fit` use the average.

    Args:
        decay: the largest weight an update gives the old average (0.998: about the last 500 steps
            count).
        warmup: the decay starts at `1 / warmup` and grows as `(1 + n) / (warmup + n)` with the
            number of updates `n`, up to `decay`.
    """

    def __init__(self, decay: float = 0.998, warmup: int = 10):
        super().__init__(use_buffers=True, avg_fn=partial(ema_update, decay=decay, warmup=warmup))
        self.swapped = False  # the module holds the average; the averaged model the raw weights

    def _swap(self, pl_module) -> None:
        self._swap_models(pl_module)
        self.swapped = not self.swapped

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if self._average_model is not None and not self.swapped:
            self._swap(pl_module)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        """The average stays in until training's next step: checkpoints are written after this."""

    def on_train_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int) -> None:
        if self.swapped:
            self._swap(pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.swapped:  # the module already holds the average
            self.swapped = False
        else:
            super().on_train_end(trainer, pl_module)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(trainer, pl_module, checkpoint)
        if self.swapped:  # the module holds the average and the averaged model the raw weights
            checkpoint["state_dict"], checkpoint["current_model_state"] = (
                checkpoint["current_model_state"],
                checkpoint["state_dict"],
            )
