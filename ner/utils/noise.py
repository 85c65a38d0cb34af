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


# logged on import by torchao (which transformers imports whenever it is installed) and by the
# ONNX exporter: kernels for GPUs that are not there, enums registered the old way, and
# torchvision's operators (unused) not being there
_IMPORT_NOISE = {
    "torchao": ("Failed to load ",),
    "torch.utils._pytree": ("<enum ",),
    "torch.onnx._internal.exporter._registration": ("torchvision is not installed",),
}


class _DropPrefixes(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...] = _TIPS):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.prefixes)


def _drop(prefixes_of: dict[str, tuple[str, ...]]) -> None:
    for name, prefixes in prefixes_of.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropPrefixes) for f in logger.filters):
            logger.addFilter(_DropPrefixes(prefixes))


def silence_imports() -> None:
    """Drop only the import noise of torchao and the ONNX exporter (`_IMPORT_NOISE`): for
    library code that imports them itself."""
    _drop(_IMPORT_NOISE)


def silence() -> None:
    """Drop Lightning's product tips and accelerator lines (`_TIPS`), the import noise of
    torchao and the ONNX exporter (`_IMPORT_NOISE`), the pytree deprecation Lightning 2.6 and
    the exporter trigger themselves, Lightning's caution about custom batch samplers at
    prediction, which ours answers, and its note that the module moves batches itself."""
    lightning = ("pytorch_lightning.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero")
    _drop({**dict.fromkeys(lightning, _TIPS), **_IMPORT_NOISE})
    warnings.filterwarnings(  # raised by Lightning and, through copyreg, by the ONNX exporter
        "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated"
    )
    # the ONNX exporter naming one dynamic axis once where several inputs share it
    warnings.filterwarnings("ignore", message=r"# The axis name: .* will not be used")
    warnings.filterwarnings(  # `ner seeds` runs the CLI in-process with its own argv
        "ignore", message=r"LightningCLI's args parameter is intended to run from within Python"
    )
    # our batch sampler yields every index at prediction (tests/test_datamodule.py)
    warnings.filterwarnings(
        "ignore", message=r"You are using a custom batch sampler `LengthBucketSampler`"
    )
    # NERTagger.transfer_batch_to_device is meant to win over the data module's (which has none)
    warnings.filterwarnings(
        "ignore", message=r"You have overridden `transfer_batch_to_device` in `LightningModule`"
    )
