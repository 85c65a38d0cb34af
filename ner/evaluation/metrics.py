"""Entity-level precision, recall and F1, exactly as seqeval computes them; DDP-safe.

Entities come from seqeval itself: `get_entities` (conlleval's lenient chunking) in the default
mode, `seqeval.scheme.Entities(..., IOB2)` in strict mode. Scores use seqeval's formulas, so they
equal `seqeval.metrics.*_score` to the last bit; zero divisions give 0.0, as in seqeval.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import torch
from seqeval.metrics.sequence_labeling import get_entities
from seqeval.scheme import IOB2, Entities
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from ner.corpus.schemes import entity_types
from ner.utils.errors import NERError

MODES = ("default", "strict")
Counts = dict[str, tuple[int, int, int]]  # type -> (true positives, predicted, gold)


def _entity_sets(sequences: list[list[str]], mode: str) -> dict[str, set]:
    if mode == "strict":
        entities = Entities(sequences, IOB2)
        return {t: entities.filter(t) for t in entities.unique_tags}
    found: dict[str, set] = defaultdict(set)
    for kind, start, end in get_entities(sequences):
        found[kind].add((start, end))
    return found


def sentence_spans(tags: Sequence[str], mode: str = "default") -> set[tuple[str, int, int]]:
    """(type, first word, last word) of each entity of one sentence of IOB2 tags, chunked as
    `entity_counts` chunks them (conlleval's lenient way, or strict IOB2)."""
    if mode == "strict":
        found = Entities([list(tags)], IOB2).entities[0]
        return {(e.tag, e.start, e.end - 1) for e in found}
    return set(get_entities(list(tags)))


def entity_counts(
    pred_tags: Sequence[Sequence[str]], gold_tags: Sequence[Sequence[str]], mode: str = "default"
) -> Counts:
    """Per entity type `(tp, predicted, gold)` over sentences of IOB2 tags, seqeval's way."""
    if mode not in MODES:
        raise NERError(f"metric mode: {mode!r} is not one of {', '.join(MODES)}")
    pred = _entity_sets([list(s) for s in pred_tags], mode)
    gold = _entity_sets([list(s) for s in gold_tags], mode)
    counts = {}
    for kind in sorted(set(pred) | set(gold)):
        p, g = pred.get(kind, set()), gold.get(kind, set())
        counts[kind] = (len(p & g), len(p), len(g))
    return counts


def _prf(tp: int, predicted: int, gold: int) -> tuple[float, float, float]:
    # seqeval's arithmetic (float64, same order of operations), so results match it exactly.
    precision = tp / predicted if predicted else 0.0
    recall = tp / gold if gold else 0.0
    denom = precision + recall
    return precision, recall, (2 * precision * recall / denom if denom else 0.0)


def entity_scores(counts: Mapping[str, Sequence[int]], types: Sequence[str] = ()) -> dict:
    """`precision`, `recall`, `f1` (micro), `macro_f1`, and per type `precision_<T>`,
    `recall_<T>`, `f1_<T>`, `support_<T>` (types from `counts` plus `types`, always reported).

    Like seqeval, the macro average runs over the types found in the gold or the predictions.
    """
    tp, predicted, gold = (sum(int(c[i]) for c in counts.values()) for i in range(3))
    precision, recall, f1 = _prf(tp, predicted, gold)
    out: dict = {"precision": precision, "recall": recall, "f1": f1}
    found = [t for t, c in counts.items() if c[1] or c[2]]
    per_type = {
        t: _prf(*(int(x) for x in counts.get(t, (0, 0, 0)))) for t in sorted({*counts, *types})
    }
    out["macro_f1"] = sum(per_type[t][2] for t in found) / len(found) if found else 0.0
    for kind, (p, r, f) in per_type.items():
        out[f"precision_{kind}"], out[f"recall_{kind}"], out[f"f1_{kind}"] = p, r, f
        out[f"support_{kind}"] = int(counts[kind][2]) if kind in counts else 0
    return out


class EntityF1(Metric):
    """Entity P/R/F1 over label ids; under DDP each sentence counts once (dedup by `sent_id`).

    `compute()` returns python numbers (floats; `support_<T>` ints), see `entity_scores`.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, labels: list[str], mode: str = "default", **kwargs):
        super().__init__(**kwargs)
        if mode not in MODES:
            raise NERError(f"metric mode: {mode!r} is not one of {', '.join(MODES)}")
        self.labels = list(labels)
        self.mode = mode
        self.types = sorted(entity_types(t for t in self.labels))
        # One row per sentence: its id, and (tp, predicted, gold) per type [T, 3].
        self.add_state("sent_ids", default=[], dist_reduce_fx="cat")
        self.add_state("counts", default=[], dist_reduce_fx="cat")

    def update(self, pred: Tensor, target: Tensor, word_mask: Tensor, sent_id: Tensor) -> None:
        """`pred`, `target [B, W]` label ids (target -100: word skipped), `word_mask`, `sent_id`."""
        keep = (word_mask.bool() & (target != -100)).tolist()
        rows = []
        for p, g, k in zip(pred.tolist(), target.tolist(), keep, strict=True):
            pred_tags = [self.labels[x] for x, use in zip(p, k, strict=True) if use]
            gold_tags = [self.labels[x] for x, use in zip(g, k, strict=True) if use]
            counts = entity_counts([pred_tags], [gold_tags], self.mode)
            rows.append([counts.get(t, (0, 0, 0)) for t in self.types])
        shape = (len(rows), len(self.types), 3)
        self.counts.append(torch.tensor(rows, dtype=torch.long, device=self.device).view(shape))
        self.sent_ids.append(sent_id.detach().to(self.device, torch.long).view(-1))

    def compute(self) -> dict:
        if not len(self.sent_ids):
            return entity_scores({}, self.types)
        ids, counts = dim_zero_cat(self.sent_ids), dim_zero_cat(self.counts)
        # DistributedSampler repeats samples to even out ranks: keep each sentence's first row.
        unique, inverse = torch.unique(ids, return_inverse=True)
        first = torch.full_like(unique, len(ids)).scatter_reduce_(
            0, inverse, torch.arange(len(ids), device=ids.device), "amin"
        )
        totals = counts[first].sum(0).tolist()  # [T, 3]
        return entity_scores(dict(zip(self.types, totals, strict=True)), self.types)


def format_report(report: Mapping[str, float], labels: Sequence[str]) -> str:
    """A seqeval-style text table of an `entity_scores` / `EntityF1.compute()` result."""
    types = sorted(entity_types(labels))
    width = max([len(t) for t in types] + [len("macro avg")])
    lines = [f"{'':>{width}}  precision    recall  f1-score   support", ""]
    for kind in types:
        p, r, f = (report[f"{m}_{kind}"] for m in ("precision", "recall", "f1"))
        lines.append(
            f"{kind:>{width}}  {p:9.4f} {r:9.4f} {f:9.4f} {int(report[f'support_{kind}']):9d}"
        )
    support = sum(int(report[f"support_{t}"]) for t in types)
    lines += [
        "",
        f"{'micro avg':>{width}}  {report['precision']:9.4f} {report['recall']:9.4f} "
        f"{report['f1']:9.4f} {support:9d}",
        f"{'macro f1':>{width}}  {'':9} {'':9} {report['macro_f1']:9.4f} {support:9d}",
    ]
    return "\n".join(lines)
