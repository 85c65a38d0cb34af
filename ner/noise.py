"""Known-harmless library noise, silenced where it is raised; every other warning stays."""

from __future__ import annotations

import logging
import warnings

# Lightning's info lines that say nothing about this run: product tips, accelerators that do not
# exist, and how it sizes the LR schedule
_TIPS = (
    "💡 Tip:",
    "TPU available:",
    "HPU available:",
    "Loading `train_dataloader` to estimate number of stepping batches.",
)


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(_TIPS)


def silence() -> None:
    """Drop Lightning's product tips and accelerator lines (`_TIPS`), the pytree deprecation
    Lightning 2.6 triggers itself (in its own `_pytree.py`), and its caution about custom batch
    samplers at prediction, which ours answers."""
    for name in ("pytorch_lightning.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropTips) for f in logger.filters):
            logger.addFilter(_DropTips())
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        module=r"pytorch_lightning",
    )
    # our batch sampler yields every index at prediction (tests/test_datamodule.py)
    warnings.filterwarnings(  # `ner seeds` runs the CLI in-process with its own argv
        "ignore", message=r"LightningCLI's args parameter is intended to run from within Python"
    )
    warnings.filterwarnings(
        "ignore", message=r"You are using a custom batch sampler `LengthBucketSampler`"
    )
