"""Document-level consistency: priors against a hand computation, decoding against plain."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import LABELS, tiny_tagger_batch

from ner.inference.consistency import FLOOR, decode_document, document_priors, label_types
from ner.inference.routine import iter_tags
from ner.modules.heads import LinearHead


def test_label_types_group_b_and_i_of_a_type():
    index, n = label_types(LABELS)  # O, B-PER, I-PER, B-LOC, I-LOC
    assert index.tolist() == [0, 1, 1, 2, 2] and n == 3


def probs_row(o: float, per: float, loc: float) -> list[float]:
    # split each type's mass unevenly over B- and I- so that only the sums can match
    return [o, 0.75 * per, 0.25 * per, 0.5 * loc, 0.5 * loc]


def test_priors_are_the_log_of_the_other_occurrences_mean_type_distribution():
    words = [["Paris", "is", "Paris"], ["is", "Paris"], ["Anna"]]
    rows = {
        (0, 0): probs_row(0.1, 0.2, 0.7),
        (0, 1): probs_row(1.0, 0.0, 0.0),
        (0, 2): probs_row(0.3, 0.6, 0.1),
        (1, 0): probs_row(1.0, 0.0, 0.0),
        (1, 1): probs_row(0.0, 0.0, 1.0),
        (2, 0): probs_row(0.2, 0.8, 0.0),
    }
    probs = [torch.tensor([rows[s, i] for i in range(len(w))]) for s, w in enumerate(words)]
    priors = document_priors(words, probs, LABELS, weight=0.5, sure=1.01)  # no gate
    # "Paris" at (0, 0): the others are (0, 2) and (1, 1): types O .15, PER .3, LOC .55
    expected = [0.5 * math.log(x) for x in (0.15, 0.3, 0.3, 0.55, 0.55)]
    assert priors[0][0].tolist() == pytest.approx(expected, abs=1e-6)
    # "Paris" at (1, 1): the others (0, 0), (0, 2): O .2, PER .4, LOC .4
    expected = [0.5 * math.log(x) for x in (0.2, 0.4, 0.4, 0.4, 0.4)]
    assert priors[1][1].tolist() == pytest.approx(expected, abs=1e-6)
    # a lower-case word however often it recurs, and a name seen once: no prior
    for s, i in ((0, 1), (1, 0), (2, 0)):
        assert priors[s][i].abs().sum() == 0


def test_a_type_no_other_occurrence_gives_costs_the_floor_not_infinity():
    words = [["Anna"], ["Anna"]]
    probs = [torch.tensor([probs_row(0.0, 1.0, 0.0)])] * 2
    prior = document_priors(words, probs, LABELS, weight=2.0, sure=1.01)[0][0]
    assert prior[0].item() == pytest.approx(2.0 * math.log(FLOOR))
    assert prior[1].item() == pytest.approx(0.0, abs=1e-6)


def test_an_occurrence_the_model_is_sure_of_gets_no_prior():
    # a city's sure dateline (LOC) and two unsure mentions (their top type at most .4)
    words = [["TORONTO"], ["TORONTO"], ["TORONTO"]]
    probs = [torch.tensor([probs_row(0.05, 0.0, 0.95)])] + [
        torch.tensor([probs_row(0.4, 0.0, 0.3)])  # .3 of the mass on a type LABELS lacks
    ] * 2
    priors = document_priors(words, probs, LABELS, weight=1.0, sure=0.7)
    assert priors[0].abs().sum() == 0
    # each unsure one reads the sure dateline and the other unsure one: O .225, LOC .625
    expected = [math.log(x) for x in (0.225, FLOOR, FLOOR, 0.625, 0.625)]
    assert priors[1][0].tolist() == pytest.approx(expected, abs=1e-6)


class Fixed:
    """A stand-in model: labels, a CRF head with no transition preferences, on the CPU."""

    def __init__(self):
        self.labels = LABELS
        self.head = LinearHead(dropout=0.0, crf=True)
        self.head.bind(1, LABELS)
        with torch.no_grad():
            for p in self.head.crf_layer.parameters():
                p.zero_()

    def parameters(self):
        return self.head.parameters()


def test_a_repeated_name_takes_the_type_of_its_confident_occurrence():
    words = [["Anna", "said"], ["Anna"]]
    clear = torch.tensor([[0.0, 6.0, 0.0, 0.0, 0.0], [6.0, 0.0, 0.0, 0.0, 0.0]])  # B-PER, O
    unsure = torch.tensor([[0.0, 1.0, 0.0, 1.2, 0.0]])  # B-LOC just above B-PER
    model = Fixed()
    outputs = [
        (e, model.head.probabilities(e[None], torch.ones(1, len(e)))[0]) for e in (clear, unsure)
    ]
    plain = [tags for tags, _ in decode_document(model, words, outputs, 0.0)]
    assert plain == [["B-PER", "O"], ["B-LOC"]]
    tags = [tags for tags, _ in decode_document(model, words, outputs, 1.0)]
    assert tags == [["B-PER", "O"], ["B-PER"]]


def test_document_decoding_at_weight_zero_is_plain_decoding(tiny_model_dir):
    model, _ = tiny_tagger_batch(tiny_model_dir, 5)
    with torch.no_grad():  # transitions that matter, so the CRF decode is exercised
        for p in model.head.crf_layer.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(5)))
    words = [["Anna", "met", "Anna"], ["Paris", "."], [], ["Anna", "in", "Paris"], ["ok"]]
    docs = [0, 0, 0, 1, 1]
    plain = list(iter_tags(model, words, doc_ids=docs, bf16=False))
    tiny = list(iter_tags(model, words, doc_ids=docs, bf16=False, consistency=1e-9))
    assert [t for t, _ in tiny] == [t for t, _ in plain]
    for (_, a), (_, b) in zip(tiny, plain, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    strong = list(iter_tags(model, words, doc_ids=docs, bf16=False, consistency=5.0))
    assert [len(t) for t, _ in strong] == [len(w) for w in words]  # one tag a word, always
