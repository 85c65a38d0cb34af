"""The real CoNLL-2003 files read exactly (counts from ../shared/data/README.md)."""

from __future__ import annotations

import json

import pytest

from ner.cli.inspect import main as inspect_main
from ner.corpus.reader import read_conll, write_conll

EXPECTED = {
    "eng.train": (946, 14041, 203621, {"LOC": 7140, "PER": 6600, "ORG": 6321, "MISC": 3438}),
    "eng.testa": (216, 3250, 51362, {"PER": 1842, "LOC": 1837, "ORG": 1341, "MISC": 922}),
    "eng.testb": (231, 3453, 46435, {"LOC": 1668, "ORG": 1661, "PER": 1617, "MISC": 702}),
}
TOTAL_ENTITIES = {"eng.train": 23499, "eng.testa": 5942, "eng.testb": 5648}


@pytest.fixture(scope="module")
def corpora(conll_dir):
    return {name: read_conll(conll_dir / name) for name in EXPECTED}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts(corpora, name):
    documents, sentences, tokens, entities = EXPECTED[name]
    corpus = corpora[name]
    assert corpus.scheme == "IOB1"
    assert len(corpus.documents) == documents
    assert len(corpus.sentences) == sentences
    assert corpus.num_tokens == tokens
    assert corpus.entities() == entities
    assert sum(corpus.entities().values()) == TOTAL_ENTITIES[name]
    assert all(doc.docstart is not None and doc.sentences for doc in corpus.documents)
    assert not any(w == "-DOCSTART-" for s in corpus.sentences for w in s.words)


def test_longest_sentence_is_in_test(corpora):
    longest = {name: max(len(s.words) for s in c.sentences) for name, c in corpora.items()}
    assert longest == {"eng.train": 113, "eng.testa": 109, "eng.testb": 124}


def test_docstart_lines_differ_between_files(corpora):
    assert corpora["eng.train"].documents[0].docstart == ["-DOCSTART-", "-X-", "O", "O"]
    assert corpora["eng.testb"].documents[0].docstart == ["-DOCSTART-", "-X-", "-X-", "O"]


def test_iob1_b_tags(corpora):
    # B- only where an entity follows one of the same type: 70 in train (README)
    raw_b = sum(c[-1].startswith("B-") for s in corpora["eng.train"].sentences for c in s.columns)
    assert raw_b == 70


def test_inspect_json_train(conll_dir, capsys):
    assert inspect_main(["--json", str(conll_dir / "eng.train")]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert {k: stats[k] for k in ("scheme", "documents", "sentences", "tokens")} == {
        "scheme": "IOB1",
        "documents": 946,
        "sentences": 14041,
        "tokens": 203621,
    }
    assert stats["entities"] == {"LOC": 7140, "MISC": 3438, "ORG": 6321, "PER": 6600}
    assert list(stats["entities"]) == ["LOC", "MISC", "ORG", "PER"]
    assert stats["longest_sentence_words"] == 113


def test_write_back_testb_in_iob1(conll_dir, corpora, tmp_path):
    corpus = corpora["eng.testb"]
    out = tmp_path / "eng.testb.out"
    write_conll(out, corpus, [s.tags for s in corpus.sentences], "IOB1")
    original = (conll_dir / "eng.testb").read_text(encoding="utf-8").splitlines()
    written = out.read_text(encoding="utf-8").splitlines()
    # the original with the (gold) tag appended: the layout conlleval reads
    assert [ln for ln in written if ln] == [f"{ln} {ln.split()[-1]}" for ln in original if ln]


def test_metric_equals_seqeval_on_converted_conll(corpora):
    """EntityF1 on eng.testa (IOB1 -> IOB2) with perturbed predictions equals seqeval."""
    import random

    import torch
    from seqeval.metrics import f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    from ner.corpus.schemes import entity_types, label_list
    from ner.evaluation.metrics import EntityF1

    corpus = corpora["eng.testa"]
    gold = [s.tags for s in corpus.sentences]
    raw = [[cols[-1] for cols in s.columns] for s in corpus.sentences]  # IOB1, as in the file
    # conlleval mode reads IOB1 and its IOB2 conversion as the same entities
    assert f1_score(raw, gold) == 1.0
    labels = label_list(entity_types(t for g in gold for t in g))
    rng = random.Random(0)
    pred = [[t if rng.random() < 0.9 else rng.choice(labels) for t in g] for g in gold]
    for mode, kwargs in (("default", {}), ("strict", {"mode": "strict", "scheme": IOB2})):
        metric = EntityF1(labels, mode=mode)
        for start in range(0, len(gold), 64):
            g, p = gold[start : start + 64], pred[start : start + 64]
            width = max(len(x) for x in g)
            target = torch.full((len(g), width), -100)
            predicted = torch.zeros((len(g), width), dtype=torch.long)
            for i, (gi, pi) in enumerate(zip(g, p, strict=True)):
                target[i, : len(gi)] = torch.tensor([labels.index(t) for t in gi])
                predicted[i, : len(pi)] = torch.tensor([labels.index(t) for t in pi])
            ids = torch.arange(start, start + len(g))
            metric.update(predicted, target, target != -100, ids)
        got = metric.compute()
        assert got["f1"] == f1_score(gold, pred, **kwargs), mode
        assert got["precision"] == precision_score(gold, pred, **kwargs), mode
        assert got["recall"] == recall_score(gold, pred, **kwargs), mode
        assert got["support_PER"] == 1842
        assert 0.4 < got["f1"] < 0.9
