"""Lightning callbacks of the `ner` commands."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
from pytorch_lightning.callbacks import BasePredictionWriter

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
