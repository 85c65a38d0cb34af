"""Hostile text, property-based (hypothesis, derandomized so runs repeat): arbitrary Unicode,
long lines without spaces, control characters, combining marks, right-to-left text, emoji
sequences, NUL bytes. No crash, one prediction per word, offsets that index the text."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ner.corpus.inputs import read_inputs
from ner.corpus.text import split_words
from ner.inference.routine import iter_tags
from ner.model.tagger import NERTagger

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
PIECES = [
    "\x00", "\x07", "\x1b[31m", "\u0301", "\u0308\u0308", "\u05e9\u05dc\u05d5\u05dd",
    "\u0645\u0631\u062d\u0628\u0627", "\u202e", "\u200f", "\u200d", "\ufeff",
    "\U0001f469\u200d\U0001f469\u200d\U0001f467", "\U0001f1eb\U0001f1f7", "\U0001f44d\U0001f3fd",
    "\u2028", "\x85", "\x0c", "\r", "\t", " ", "Paris", "U.S.", "1,000", "'s", "-", "\ud7ff",
]  # fmt: skip
HOSTILE = st.one_of(
    st.text(max_size=300),  # any code point hypothesis likes, surrogates excluded
    st.lists(st.sampled_from(PIECES), max_size=60).map("".join),
    st.text(st.characters(blacklist_categories=("Zs", "Cc", "Zl", "Zp", "Cs")), min_size=400,
            max_size=2000),  # one very long "word" or run of words with no space at all
)  # fmt: skip
SETTINGS = settings(
    max_examples=150, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip


@pytest.fixture(scope="module")
def tagger(tiny_model_dir):
    return NERTagger(encoder=str(tiny_model_dir), labels=LABELS).eval()


@SETTINGS
@given(texts=st.lists(HOSTILE, min_size=1, max_size=4))
def test_every_word_of_hostile_text_gets_one_tag_and_valid_spans(tagger, texts):
    results = tagger.predict(texts, doc_ids=[0] * len(texts))  # one document: context too
    assert len(results) == len(texts)
    for text, entities in zip(texts, results, strict=True):
        words = split_words(text)
        bounds = {s for _, s, _ in words}, {e for _, _, e in words}
        for entity in entities:
            assert 0 <= entity["start"] < entity["end"] <= len(text)
            assert entity["text"] == text[entity["start"] : entity["end"]]
            assert entity["start"] in bounds[0] and entity["end"] in bounds[1]
    tagged = list(iter_tags(tagger, [[w for w, _, _ in split_words(t)] for t in texts]))
    for text, (tags, scores) in zip(texts, tagged, strict=True):
        assert len(tags) == len(scores) == len(split_words(text))
        assert set(tags) <= set(LABELS)


@SETTINGS
@given(lines=st.lists(st.lists(st.sampled_from(PIECES), max_size=12).map("".join), min_size=1,
                      max_size=20), crlf=st.booleans())  # fmt: skip
def test_text_input_is_one_record_per_newline_line(lines, crlf, monkeypatch):
    lines = [line.rstrip("\r") for line in lines]  # a \r that ends a line is read as CRLF's
    data = ("\r\n" if crlf else "\n").join(lines).encode("utf-8") + b"\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    passages = read_inputs("-", kind="text").passages
    assert [p.line for p in passages] == list(range(1, len(lines) + 1))
    lines[0] = lines[0].removeprefix("\ufeff")  # a byte-order mark opening the input is dropped
    assert [p.text for p in passages] == lines  # U+2028, U+0085, form feed stay inside a line
    for passage in passages:
        assert [passage.text[s:e] for s, e in passage.offsets] == passage.words
