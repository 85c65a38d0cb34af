"""A callback for the resume tests: `kill -9` of its own process at a chosen moment."""

from __future__ import annotations

import os
import signal

from pytorch_lightning.callbacks import Callback


class KillAt(Callback):
    """SIGKILL the process when the optimizer has taken `step` steps (at the next batch start),
    as a user's `kill -9` or the OOM killer would: no handler, no cleanup."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)
