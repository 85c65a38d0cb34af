"""Decoding at the end of an epoch, for a tagger that decodes with document-level consistency
(`NERTagger(consistency=W)`, `ner.inference.consistency`).

A sentence's tags then depend on the other sentences of its document, and the batches of
validation, test and prediction cut documents apart (they are sorted by length). So each
sentence's emissions and tag probabilities are held until the epoch has seen every sentence, then
each document is decoded as `ner tag` decodes it: one decoding for the metric, the checkpoint
choice, `ner test`'s report and `ner predict`'s output alike.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from ner.evaluation.metrics import EntityF1
from ner.inference.consistency import decode_documents, pad, split_outputs
from ner.utils.distributed import merged
from ner.utils.errors import NERError

Tagged = tuple[list[str], list[float]]  # IOB2 tags and per-word scores of one sentence


class HeldOutputs:
    """One epoch's per-sentence outputs by `sent_id` (and gold label ids, where labelled)."""

    def __init__(self) -> None:
        self.outputs: dict[int, tuple[Tensor, Tensor]] = {}  # emissions, probabilities [n, C]
        self.gold: dict[int, Tensor] = {}  # label ids [n], -100 where unlabelled

    def add(self, model: Any, batch: dict[str, Tensor], emissions: Tensor) -> None:
        """Hold each sentence of a batch, given the batch's emissions `[B, W, C]`."""
        rows = split_outputs(model, emissions, batch["word_mask"])
        for i, (sent_id, row) in enumerate(zip(batch["sent_id"].tolist(), rows, strict=True)):
            self.outputs[sent_id] = row
            if "labels" in batch:
                self.gold[sent_id] = batch["labels"][i, : len(row[0])].cpu()

    def decode(self, model: Any, split: str) -> dict[int, Tagged]:
        """Tags and scores of every held sentence of `split` (every rank's, under DDP) by
        `sent_id`, each document decoded whole with the model's consistency weight; the outputs
        are released (the gold ids stay for `update_metric`)."""
        datamodule = getattr(model.trainer, "datamodule", None)
        if not hasattr(datamodule, "documents"):
            raise NERError("decoding with consistency needs the documents of an NERDataModule")
        words, doc_ids = datamodule.documents(split)  # indexed by sent_id
        outputs, self.outputs = merged(self.outputs), {}
        ids = sorted(outputs)
        tagged = decode_documents(
            model,
            (words[i] for i in ids),
            (outputs[i] for i in ids),
            (doc_ids[i] for i in ids),
            model.consistency,
        )
        return dict(zip(ids, tagged, strict=True))

    def update_metric(self, metric: EntityF1, tagged: dict[int, Tagged]) -> None:
        """Score `tagged` (from `decode`) against the held gold ids; the gold is released."""
        gold, self.gold = merged(self.gold), {}
        ids = sorted(tagged)
        if not ids:
            return
        index = {label: i for i, label in enumerate(metric.labels)}
        pred = [torch.tensor([index[t] for t in tagged[i][0]], dtype=torch.long) for i in ids]
        padded, word_mask = pad(pred)  # [B, W], [B, W]
        target = pad_sequence([gold[i] for i in ids], batch_first=True, padding_value=-100)
        metric.update(padded, target, word_mask, torch.tensor(ids))
