"""Error analysis of a test run: F1 by entity length and by whether the entity was seen in
training, type confusions (span right, type wrong), boundary errors (type right, span wrong),
and a bootstrap confidence interval of micro F1 over sentences. Entities are chunked as the
metric chunks them (`ner.evaluation.metrics.sentence_spans`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ner.evaluation.metrics import sentence_spans

LENGTHS = ("1", "2", "3", "4+")
Span = tuple[str, int, int]  # type, first word, last word


def length_bucket(span: Span) -> str:
    """`1`, `2`, `3` or `4+` words."""
    n = span[2] - span[1] + 1
    return str(n) if n < 4 else "4+"


def surface(words: Sequence[str], span: Span) -> str:
    """The entity's words, joined by spaces."""
    return " ".join(words[span[1] : span[2] + 1])


def training_entities(sentences: Iterable[tuple[Sequence[str], Sequence[str]]]) -> set[str]:
    """The surface strings of every entity in (words, IOB2 tags) training sentences."""
    return {surface(w, s) for w, tags in sentences for s in sentence_spans(tags)}


def _prf(tp: int, pred: int, gold: int) -> dict[str, float | int]:
    p = tp / pred if pred else 0.0
    r = tp / gold if gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": p, "recall": r, "f1": f, "tp": tp, "predicted": pred, "gold": gold}


def _bucketed(pairs, key) -> dict[str, dict[str, float | int]]:
    """P/R/F1 per bucket of `key(words, span)`, counting predicted, gold and matched spans."""
    tp, pred, gold = Counter(), Counter(), Counter()
    for words, gold_spans, pred_spans in pairs:
        gold.update(key(words, s) for s in gold_spans)
        pred.update(key(words, s) for s in pred_spans)
        tp.update(key(words, s) for s in gold_spans & pred_spans)
    return {b: _prf(tp[b], pred[b], gold[b]) for b in sorted(set(gold) | set(pred))}


def _errors(pairs) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Type confusions {gold type: {predicted type: n}} and boundary errors {type: n}."""
    confusion: dict[str, Counter] = defaultdict(Counter)
    boundary: Counter = Counter()
    for _, gold_spans, pred_spans in pairs:
        for kind, start, end in gold_spans - pred_spans:
            same_span = [p for p in pred_spans if p[1:] == (start, end)]
            if same_span:
                confusion[kind][same_span[0][0]] += 1
            elif any(p[0] == kind and p[1] <= end and start <= p[2] for p in pred_spans):
                boundary[kind] += 1
    return {k: dict(v) for k, v in sorted(confusion.items())}, dict(sorted(boundary.items()))


def bootstrap_f1(
    counts: np.ndarray, samples: int = 1000, level: float = 0.95, seed: int = 0
) -> dict[str, float]:
    """Percentile interval of micro F1 = 2 tp / (predicted + gold) over `samples` resamples of
    the sentences (`counts [sentences, 3]`: tp, predicted, gold), with replacement."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(counts), size=(samples, len(counts)))  # [samples, sentences]
    totals = counts[draws].sum(axis=1)  # [samples, 3]
    denominator = totals[:, 1] + totals[:, 2]
    f1 = np.divide(2 * totals[:, 0], denominator, out=np.zeros(samples), where=denominator > 0)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(f1, [tail, 100 - tail])
    return {"low": float(low), "high": float(high), "level": level, "samples": samples}


def analyse(
    words: Sequence[Sequence[str]],
    gold: Sequence[Sequence[str]],
    pred: Sequence[Sequence[str]],
    seen: set[str] | None = None,
    mode: str = "default",
    samples: int = 1000,
) -> dict[str, Any]:
    """The analysis of predicted against gold IOB2 tags (`seen`: training entity strings)."""
    pairs = [
        (w, sentence_spans(g, mode), sentence_spans(p, mode))
        for w, g, p in zip(words, gold, pred, strict=True)
    ]
    out: dict[str, Any] = {"by_length": _bucketed(pairs, lambda w, s: length_bucket(s))}
    if seen is not None:
        in_train = lambda w, s: "seen" if surface(w, s) in seen else "unseen"  # noqa: E731
        out["by_seen"] = _bucketed(pairs, in_train)
    out["type_confusion"], out["boundary_errors"] = _errors(pairs)
    counts = np.array([(len(g & p), len(p), len(g)) for _, g, p in pairs], dtype=np.int64)
    out["bootstrap_f1"] = bootstrap_f1(counts.reshape(-1, 3), samples)
    return out


def format_analysis(analysis: dict[str, Any]) -> str:
    """The analysis as text tables, under the per-type report of `ner test`."""
    lines = []
    for title, key in (("entity length", "by_length"), ("seen in training", "by_seen")):
        if key not in analysis:
            continue
        lines += ["", f"{title:>16}  precision    recall  f1-score   support"]
        for bucket, r in analysis[key].items():
            p, rec, f, n = r["precision"], r["recall"], r["f1"], r["gold"]
            lines.append(f"{bucket:>16}  {p:9.4f} {rec:9.4f} {f:9.4f} {n:9d}")
    confusion = analysis["type_confusion"]
    if confusion:
        lines += ["", "type confusions (span right, type wrong): gold -> predicted"]
        for gold_type, row in confusion.items():
            lines.append(
                "  " + gold_type + ": " + ", ".join(f"{t} {n}" for t, n in sorted(row.items()))
            )
    boundary = analysis["boundary_errors"]
    if boundary:
        shown = ", ".join(f"{t} {n}" for t, n in boundary.items())
        lines += ["", f"boundary errors (type right, span wrong): {shown}"]
    ci = analysis["bootstrap_f1"]
    lines += [
        "",
        f"micro F1 {100 * ci['level']:.0f}% bootstrap interval ({ci['samples']} resamples of "
        f"the sentences): [{ci['low']:.4f}, {ci['high']:.4f}]",
    ]
    return "\n".join(lines)
