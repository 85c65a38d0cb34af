"""What makes a killed `ner fit` resumable with `--ckpt_path last`: checkpoints written
atomically on their own filesystem, a `last.ckpt` at every epoch end (and every N steps if
asked), and the random state saved with it so the resumed run draws the same dropout masks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import Callback, ModelCheckpoint

from ner.utils.files import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints written to a temporary file beside the target, synced, then renamed.

    Lightning's own save goes through fsspec, which stages the file in `$TMPDIR` and *moves* it:
    a copy, not a rename, when `$TMPDIR` is another filesystem, so a kill mid-copy leaves a
    truncated checkpoint. Remote paths (`s3://...`) keep Lightning's path."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        """Save `checkpoint` at `path` whole or not at all."""
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, binary=True, durable=True) as handle:
            torch.save(checkpoint, handle)


class LastCheckpoint(ModelCheckpoint):
    """`last.ckpt`: the latest training state, rewritten at every training-epoch end and, with
    `every_n_steps` > 0, every N optimizer steps as well (for runs whose epochs are long).

    Args:
        dirpath: Where to write it (unset: `checkpoints/<run>/`).
        every_n_steps: Also save every N optimizer steps; 0 = only at epoch ends.
    """

    def __init__(self, dirpath: str | None = None, every_n_steps: int = 0):
        super().__init__(
            dirpath=dirpath,
            filename="last",
            save_top_k=1,
            save_on_train_epoch_end=True,
            enable_version_counter=False,
            every_n_train_steps=every_n_steps or None,
        )
        self.every_n_steps = every_n_steps

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        """Save at every epoch end, also when step saving has turned epoch saving off."""
        if self._should_skip_saving_checkpoint(trainer):
            return
        self._save_topk_checkpoint(trainer, self._monitor_candidates(trainer))


class ResumeState(Callback):
    """Saves torch's random state (CPU and CUDA) in each checkpoint and restores it on resume,
    so the run after `--ckpt_path last` draws what the uninterrupted run would have drawn; and
    hands the saved loader position to the training loader.

    The second is a workaround: a `configure_optimizers` that reads
    `trainer.estimated_stepping_batches` (ours does, for the schedule) makes Lightning build
    the train loader before it restores the loops, and the loop then never passes the loader
    its saved state (`FitLoop.setup_data` returns early), so a mid-epoch resume would start
    the epoch again."""

    def on_train_start(self, trainer, pl_module) -> None:
        """Give the loader the position Lightning restored but did not pass on."""
        loop = trainer.fit_loop
        pending = getattr(loop, "_combined_loader_states_to_load", None)
        if pending and loop._combined_loader is not None:
            loop._combined_loader._load_state_dicts(pending)
            loop._combined_loader_states_to_load = []

    def state_dict(self) -> dict[str, Any]:
        """The generators' states at the moment of the save."""
        state = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved states (a CUDA state only where CUDA is there to take it)."""
        torch.set_rng_state(state_dict["cpu"])
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])
