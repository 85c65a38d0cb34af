"""Error analysis of `ner test`: buckets that sum to the totals, confusions, bootstrap interval."""

from __future__ import annotations

import numpy as np
import pytest

from ner.evaluation.error_analysis import analyse, bootstrap_f1, format_analysis, training_entities
from ner.evaluation.metrics import entity_counts, entity_scores

WORDS = [
    ["John", "Smith", "visited", "New", "York", "City", "Hall", "."],
    ["Acme", "Corp", "hired", "Mary", "."],
    ["Paris", "is", "nice"],
]
GOLD = [
    ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "I-LOC", "I-LOC", "O"],
    ["B-ORG", "I-ORG", "O", "B-PER", "O"],
    ["B-LOC", "O", "O"],
]
PRED = [
    ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "O", "O"],  # PER right, LOC boundary
    ["B-ORG", "I-ORG", "O", "B-LOC", "O"],  # ORG right, Mary PER -> LOC
    ["B-LOC", "O", "O"],  # right
]


def test_buckets_sum_to_the_totals():
    result = analyse(WORDS, GOLD, PRED, seen={"John Smith", "Paris"})
    totals = entity_counts(PRED, GOLD)
    tp, pred, gold = (sum(c[i] for c in totals.values()) for i in range(3))
    for key in ("by_length", "by_seen"):
        buckets = result[key].values()
        assert sum(b["tp"] for b in buckets) == tp == 3
        assert sum(b["predicted"] for b in buckets) == pred == 5
        assert sum(b["gold"] for b in buckets) == gold == 5
    assert set(result["by_length"]) == {"1", "2", "4+"}
    # two-word entities: gold John Smith, Acme Corp; predicted those and "New York" (cut short)
    assert result["by_length"]["2"] == {
        "precision": 2 / 3, "recall": 1.0, "f1": 0.8, "tp": 2, "predicted": 3, "gold": 2
    }  # fmt: skip
    assert result["by_seen"]["seen"]["tp"] == 2 and result["by_seen"]["unseen"]["gold"] == 3


def test_confusions_and_boundary_errors():
    result = analyse(WORDS, GOLD, PRED)
    assert result["type_confusion"] == {"PER": {"LOC": 1}}
    assert result["boundary_errors"] == {"LOC": 1}
    assert "by_seen" not in result
    text = format_analysis(result)
    assert "PER: LOC 1" in text and "boundary errors (type right, span wrong): LOC 1" in text


def test_bootstrap_of_a_perfect_prediction_is_one_one():
    result = analyse(WORDS, GOLD, GOLD)
    assert (result["bootstrap_f1"]["low"], result["bootstrap_f1"]["high"]) == (1.0, 1.0)


def test_bootstrap_of_a_small_case_matches_the_hand_computation():
    # sentence A: 1 of 1 right; B: its 1 prediction wrong. Resampling 2 sentences gives AA
    # (F1 1), AB or BA (2*1/(2+2) = 0.5), BB (0) with chances 1/4, 1/2, 1/4; the central 95%
    # of that distribution runs from 0 to 1, and its mean is 0.5.
    counts = np.array([[1, 1, 1], [0, 1, 1]])
    ci = bootstrap_f1(counts, samples=4000, seed=1)
    assert (ci["low"], ci["high"]) == (0.0, 1.0)
    # A, A, B: F1 of the whole set 2*2/(3+3); every resample is a mix, the 2.5% tail all-B
    counts = np.array([[1, 1, 1], [1, 1, 1], [0, 1, 1]])
    ci = bootstrap_f1(counts, samples=4000, seed=1)
    # P(all three draws B) = 1/27 = 3.7% > 2.5%: the low end is 0; P(all A) = 8/27: high is 1
    assert (ci["low"], ci["high"]) == (0.0, 1.0)
    ci = bootstrap_f1(np.array([[2, 2, 2], [1, 2, 2]]), samples=4000, seed=1)
    # AA 1, AB/BA 3/4, BB 1/2: central interval [0.5, 1]
    assert (ci["low"], ci["high"]) == (0.5, 1.0)


def test_micro_f1_of_the_resample_formula_is_seqeval_s():
    counts = entity_counts(PRED, GOLD)
    tp, pred, gold = (sum(c[i] for c in counts.values()) for i in range(3))
    assert 2 * tp / (pred + gold) == pytest.approx(entity_scores(counts)["f1"])


def test_training_entities_are_surface_strings():
    assert training_entities(zip(WORDS, GOLD, strict=True)) == {
        "John Smith", "New York City Hall", "Acme Corp", "Mary", "Paris"
    }  # fmt: skip
