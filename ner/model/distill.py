"""Distillation: a student tagger trained on an ensemble's soft targets as well as the gold tags.

The teacher is an `ner.inference.ensemble.Ensemble` of checkpoints (e.g. the seeds of `ner seeds`)
run on each training batch, so any recipe, packs and document context included, distils without
a separate pass that would have to match the batches. Its target for each word is the ensemble's
tag distribution: the marginals of the one CRF its CRF members make (mean emissions and
transitions), or the mean softmax. The student's loss adds the cross-entropy of its own word
distribution (CRF marginals or softmax) against that target, posterior distillation as in Wang
et al. 2020, "Structure-Level Knowledge Distillation For Multilingual Sequence Labeling".

The teacher's weights are never part of the student: not in its parameters (nothing of them is
trained), not in its checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ner.inference.ensemble import Ensemble, batch_mismatch
from ner.modules.heads import IGNORE, TaggingHead
from ner.utils.errors import NERError


class Teacher(nn.Module):
    """An ensemble of checkpoints whose word distributions a student learns from.

    Args:
        checkpoints: the teachers' `best.ckpt` files (one or more; same tokenizer, windows and
            labels as each other and as the student's data).
        weight: share of the distillation loss; the gold tags' loss has the rest.
    """

    def __init__(self, checkpoints: Sequence[str], weight: float = 0.5):
        super().__init__()
        if not 0.0 <= weight <= 1.0:
            raise NERError(f"weight {weight} is not in [0, 1]", path="model.teacher.weight")
        if not checkpoints:
            raise NERError("no teacher checkpoints", path="model.teacher.checkpoints")
        self.checkpoints, self.weight = [str(p) for p in checkpoints], weight
        self.ensemble: Ensemble | None = None  # loaded when training starts (`attach`)

    def train(self, mode: bool = True) -> Teacher:
        return super().train(False)  # a teacher never drops out

    def attach(self, student: Any, load: Callable[[str], nn.Module]) -> None:
        """Load the checkpoints with `load` (`ner.model.tagger.load_tagger`); a one-line error
        unless the student's batches (labels, window settings, tokenizer, word inputs) are the
        teachers' batches."""
        members = [load(path) for path in self.checkpoints]
        self.ensemble = Ensemble(members, names=self.checkpoints).eval()
        self.ensemble.requires_grad_(False)
        ens, where = self.ensemble, "model.teacher.checkpoints"
        what = batch_mismatch(ens, student)
        if what is not None:
            raise NERError(f"the teachers' {what} differ from the student's data", path=where)
        missing = set(ens.word_inputs) - set(student.word_inputs)
        if missing:
            raise NERError(
                f"the teachers read word inputs the student lacks: {missing}", path=where
            )

    @torch.no_grad()
    def targets(self, batch: dict[str, Tensor]) -> Tensor:
        """The ensemble's tag distribution of each word `[B, W, C]` (0 on padding)."""
        if self.ensemble is None:
            raise NERError("the teacher is not attached to a student yet (`attach`)")
        mask = batch["word_mask"]
        if next(self.ensemble.parameters()).device != mask.device:  # Lightning moved the student
            self.ensemble.to(mask.device)
        emissions = self.ensemble(batch)  # [B, W, C]
        if self.ensemble.crf:
            return self.ensemble.head.probabilities(emissions, mask)  # [B, W, C]
        return emissions.exp() * mask.unsqueeze(-1)  # [B, W, C]

    def mix(
        self, student: Any, batch: dict[str, Tensor], emissions: Tensor, gold: Tensor
    ) -> Tensor:
        """The student's training loss: `weight` of the distillation loss, the rest gold's (both
        also logged, as `train/distill_loss` and `train/gold_loss`)."""
        targets = self.targets(batch)  # [B, W, C]
        soft = distillation_loss(
            student.head, emissions, targets, batch["labels"], batch["word_mask"]
        )
        size = len(batch["sent_id"])
        student.log("train/gold_loss", gold, batch_size=size)
        student.log("train/distill_loss", soft, batch_size=size)
        return (1 - self.weight) * gold + self.weight * soft


def distillation_loss(
    head: TaggingHead, emissions: Tensor, targets: Tensor, labels: Tensor, word_mask: Tensor
) -> Tensor:
    """Mean cross-entropy per labelled word of the student's distribution against `targets`."""
    labelled = word_mask.bool() & (labels != IGNORE)  # [B, W]
    log_p = head.log_probabilities(emissions, word_mask)  # [B, W, C]
    # a tag the teacher rules out (IOB2 constraints) adds nothing, even where log p is -inf
    per_word = -torch.where(targets > 0, targets * log_p, 0.0).sum(-1)  # [B, W]
    return per_word.masked_fill(~labelled, 0.0).sum() / labelled.sum().clamp(min=1)
