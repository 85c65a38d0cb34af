"""Lightning callbacks of the `ner` commands."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
from pytorch_lightning.callbacks import BasePredictionWriter, Callback
from pytorch_lightning.utilities import rank_zero_info
from pytorch_lightning.utilities.model_summary import get_human_readable_count

from ner.outputs import check_format, write_predictions


class PredictionFileWriter(BasePredictionWriter):
    """`ner predict --output OUT`: gathers every rank's predictions and writes them once, in
    input order, through the writer `ner tag` uses."""

    def __init__(self, datamodule, output: str | None, fmt: str = "jsonl"):
        super().__init__(write_interval="epoch")
        self.datamodule, self.output, self.fmt = datamodule, output, check_format(fmt)

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices) -> None:
        rows = [row for batch in predictions for row in batch]
        if dist.is_available() and dist.is_initialized():
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, rows)
            rows = [row for part in gathered for row in part]
        if not trainer.is_global_zero:
            return
        by_id = {row["sent_id"]: (row["tags"], row["scores"]) for row in rows}
        inp = self.datamodule.predict_input
        tagged = [by_id[i] for i in range(len(inp.passages))]
        write_predictions(inp.passages, tagged, self.fmt, self.output, inp.corpus, inp.name)


def describe(model) -> str:
    """One line: a tagger's pipeline parts and parameter counts."""
    config = model.encoder.config
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    parts = [
        f"{type(model.encoder).__name__} ({config.num_hidden_layers} x {config.hidden_size})",
        type(model.combiner).__name__,
        f"{model.pooling.mode} piece",
        type(model.head).__name__ + (" + CRF" if model.head.crf else ""),
    ]
    if model.word_features is not None:
        parts.insert(3, f"+ word features ({model.word_features.output_dim()})")
    count = get_human_readable_count
    return f"{' -> '.join(parts)}: {count(total)} parameters, {count(trainable)} trained"


class PipelineSummary(Callback):
    """At the start of training, one line on the model (instead of Lightning's summary table,
    whose FLOP count reads 0 for this model and whose size estimate ignores bf16)."""

    def on_fit_start(self, trainer, pl_module) -> None:
        rank_zero_info(f"model: {describe(pl_module)}")


class CompileEncoder(Callback):
    """`torch.compile` (inductor) the encoder when training starts; opt-in, e.g.
    `--trainer.callbacks+=ner.callbacks.CompileEncoder`. The length buckets give many shapes,
    so the graph is compiled with dynamic shapes; the first steps pay the compilation
    (README, Performance: what it bought, and cost, here).

    Args:
        dynamic: compile for symbolic batch and length sizes (False: one graph per shape).
    """

    def __init__(self, dynamic: bool = True):
        self.dynamic = dynamic

    def on_fit_start(self, trainer, pl_module) -> None:
        pl_module.encoder.compile(dynamic=self.dynamic)
