"""`SplitEvaluation`: how `NERTagger` scores one split over an epoch (validation or test).

Each batch is decoded and counted as it comes; with document-level consistency
(`NERTagger.consistency`) its sentences are held instead and decoded a document at a time when
the epoch ends (`ner.model.document_decoding`). Either way every sentence's predicted tags are
kept by `sent_id`, for `ner test`'s report and error analysis.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from ner.evaluation.metrics import EntityF1
from ner.model.document_decoding import HeldOutputs
from ner.utils.distributed import merged


class SplitEvaluation(nn.Module):
    """The metric, predicted tags and held outputs of one split within an epoch.

    Args:
        labels: the IOB2 label set.
        mode: entity matching, `default` (conlleval) or `strict` (IOB2).
        keep_predictions: keep each sentence's tags (test's report reads them; validation
            needs only the metric, and gathering tags from every rank each epoch costs).
    """

    def __init__(self, labels: list[str], mode: str = "default", keep_predictions: bool = True):
        super().__init__()
        self.keep_predictions = keep_predictions
        self.metric = EntityF1(labels, mode=mode)
        self.held = HeldOutputs()
        self.predictions: dict[int, list[str]] = {}

    def start(self) -> None:
        """Forget the previous epoch's predictions."""
        self.predictions = {}

    def step(self, model: Any, batch: dict[str, Tensor], emissions: Tensor) -> None:
        """Decode and count a batch's sentences (with consistency: hold them)."""
        if model.consistency:
            self.held.add(model, batch, emissions)
            return
        tags, _ = model.head.decode(emissions, batch["word_mask"])  # [B, W]
        self.metric.update(tags, batch["labels"], batch["word_mask"], batch["sent_id"])
        if not self.keep_predictions:
            return
        lengths = batch["word_mask"].sum(1).tolist()
        for sent_id, row, n in zip(batch["sent_id"].tolist(), tags.tolist(), lengths, strict=True):
            self.predictions[sent_id] = [model.labels[t] for t in row[:n]]

    def end(self, model: Any, split: str) -> dict[str, float]:
        """The epoch's scores (`EntityF1.compute`), held sentences decoded first; the metric is
        reset, and every rank ends up with all the predictions."""
        if model.consistency:
            tagged = self.held.decode(model, split)
            self.held.update_metric(self.metric, tagged)
            if self.keep_predictions:
                self.predictions.update({i: tags for i, (tags, _) in tagged.items()})
        values = {k: float(v) for k, v in self.metric.compute().items()}
        self.metric.reset()
        if self.keep_predictions:
            self.predictions = merged(self.predictions)
        return values
