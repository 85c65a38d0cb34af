"""Document-level consistency: priors against a hand computation, decoding against plain."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import LABELS, load_script, tiny_sentences, tiny_tagger_batch, write_tiny_corpus

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


def test_the_sweep_script_scores_each_weight_as_iter_tags_decodes_it(trained, tmp_path, capsys):
    """`scripts/consistency.py`: a weight's F1 is seqeval's on `iter_tags(consistency=W)`."""
    from seqeval.metrics import f1_score

    from ner.corpus.reader import read_conll
    from ner.model.tagger import load_tagger

    module = load_script("consistency", "consistency_script")
    ckpt = str(trained["ckpt"] / "best.ckpt")
    dev = write_tiny_corpus(tmp_path / "dev.txt", tiny_sentences(12, seed=3), docs=3)
    out = tmp_path / "sweep.json"
    module.main(
        [ckpt, "--file", str(dev), "--weights", "0", "2", "--sure", "1.01", "--json", str(out)]
    )
    rows = json.loads(out.read_text())
    corpus = read_conll(str(dev))
    model = load_tagger(ckpt)
    for weight in (0.0, 2.0):
        tags = iter_tags(model, [s.words for s in corpus.sentences], weight, doc_ids=corpus.doc_ids)
        expected = f1_score([s.tags for s in corpus.sentences], [t for t, _ in tags])
        assert rows[ckpt][str(weight)]["f1"] == pytest.approx(expected)
    assert "| 0.0 | 2.0 |" in capsys.readouterr().out
    plain = write_tiny_corpus(tmp_path / "plain.txt", tiny_sentences(3, seed=3), docs=0)
    with pytest.raises(SystemExit, match="no -DOCSTART-"):
        module.main([ckpt, "--file", str(plain)])


def test_the_sweep_script_reads_the_context_it_is_given(trained, tmp_path, monkeypatch):
    """`--context-pieces N`: each weight's F1 is that of the model decoding with N context pieces
    a side instead of its checkpoint's own."""
    from seqeval.metrics import f1_score

    from ner.corpus.reader import read_conll
    from ner.model.tagger import load_tagger

    module = load_script("consistency", "consistency_script")
    ckpt = str(trained["ckpt"] / "best.ckpt")
    dev = write_tiny_corpus(tmp_path / "dev.txt", tiny_sentences(12, seed=4), docs=3)
    out = tmp_path / "sweep.json"
    seen = []  # the context each model scores the file with
    routine = module.map_batches
    monkeypatch.setattr(
        module,
        "map_batches",
        lambda model, *a, **k: (
            seen.append(model.window_settings.context_pieces) or routine(model, *a, **k)
        ),
    )
    module.main(
        [ckpt, "--file", str(dev), "--weights", "1", "--context-pieces", "5", "--json", str(out)]
    )
    assert seen == [5]
    corpus = read_conll(str(dev))
    model = load_tagger(ckpt)
    assert model.window_settings.context_pieces != 5
    model.window_settings = model.window_settings.overridden(context_pieces=5)
    tags = iter_tags(model, [s.words for s in corpus.sentences], 1.0, doc_ids=corpus.doc_ids)
    expected = f1_score([s.tags for s in corpus.sentences], [t for t, _ in tags])
    assert json.loads(out.read_text())[ckpt]["1.0"]["f1"] == pytest.approx(expected)
