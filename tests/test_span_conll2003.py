"""CoNLL sentences (words joined with single spaces, as `ner tag` passes CoNLL input on) written
as each span format and read back as training data: spaCy/Prodigy's `tokens` and ner's own
`words` carry the words, so those come back exactly; doccano and Label Studio have no place for
words, so theirs are the raw-text splitter's, which keeps CoNLL-2003's words but for a few glued
to a mark (listed below: the independent answer, by hand). Planted sentences need no data."""

from __future__ import annotations

from collections import Counter

import pytest
from round_trip import FORMATS, round_trip

from ner.corpus.reader import read_conll

SPLITTER_ONLY = ("doccano", "label-studio")  # formats without a place for words
# eng.testa's words the splitter cuts, each in one sentence: a backquote opening a quotation, an
# exchange rate written as an equation, a rule of dashes after a word, a label run into a phone
# number, an ellipsis run into the next word: raw text with these wants them cut
TESTA_CUT = Counter({("`LOST", "` LOST"): 1, ("1=80", "1 = 80"): 1, ("oOo-----", "oOo -----"): 1,
                     ("Tel+44", "Tel + 44"): 1, ("...I", "... I"): 1})  # fmt: skip

# CoNLL-2003-style sentences, one rule of the splitter each at least (tests/test_split_words.py),
# and a word no rule keeps whole, "oOo-----"
PLANTED = [
    ("1. Michael Johnson ( U.S. ) 19.66", "O B-PER I-PER O B-LOC O O"),
    ("1= Andrei Tiwontschik ( Germany ) 5.86", "O B-PER I-PER O B-LOC O O"),
    ("M. Jones of Acme Corp. did n't say -- on Oct. 3 ...",
     "B-PER I-PER O B-ORG I-ORG O O O O O O O O"),
    ("O'Brien 's U.S.-led bid : C$ +0.5 , .496 at 4:08.22", "B-PER O B-MISC O O O O O O O O"),
    ("pre- and post-war AA- BBB+ anti-U.S. talks", "O O O O O B-MISC O"),
    ("mail jeffrey.hodgson@reuters.com or http://www.reuters.com/x", "O O O O"),
    ("oOo----- STOCKS SINK", "O O O"),
]  # fmt: skip


def planted() -> list[tuple[list[str], list[str]]]:
    return [(words.split(" "), tags.split(" ")) for words, tags in PLANTED]


@pytest.mark.parametrize("fmt", FORMATS)
def test_planted_sentences_round_trip(tmp_path, fmt):
    sentences = planted()
    assert all(len(w) == len(t) for w, t in sentences)
    got = round_trip(sentences, fmt, tmp_path)
    assert got.misaligned == 0
    if fmt in SPLITTER_ONLY:
        assert got.back == sentences[:-1] + [(["oOo", "-----", "STOCKS", "SINK"], ["O"] * 4)]
        assert got.changes == Counter({("oOo-----", "oOo -----"): 1})
    else:
        assert got.back == sentences and got.differ == 0


@pytest.mark.integration
@pytest.mark.parametrize("fmt", FORMATS)
def test_eng_testa_round_trips_through_each_format(conll_dir, tmp_path, fmt, capsys):
    sentences = [(s.words, s.tags) for s in read_conll(conll_dir / "eng.testa").sentences]
    got = round_trip(sentences, fmt, tmp_path)
    with capsys.disabled():
        print(f"\n{fmt}: {len(got.back):,} sentences read back, {got.differ} differ")
    assert len(got.back) == len(sentences) == 3250 and got.misaligned == 0
    if fmt in SPLITTER_ONLY:
        assert got.changes == TESTA_CUT and got.differ == sum(TESTA_CUT.values())
    else:
        assert got.back == sentences
