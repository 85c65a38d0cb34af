"""Training packs: consecutive sentences of one document as one training row."""

from __future__ import annotations

from ner.data.packing import pack_rows


def brute_force_packs(sentences, docs, max_words):
    """Independent answer: walk the sentences, start a new pack on a new document or when the
    next sentence would pass the cap."""
    packs, current, current_doc = [], [], None
    for words, doc in zip(sentences, docs, strict=True):
        if current and doc == current_doc and len(current) + len(words) <= max_words:
            current += words
        else:
            if current or current_doc is not None:
                packs.append((current, current_doc))
            current, current_doc = list(words), doc
    packs.append((current, current_doc))
    return packs


def test_pack_rows_against_a_walk():
    sentences = [["a"] * n for n in (3, 4, 2, 9, 1, 1, 5, 12, 2)]
    docs = [0, 0, 0, 0, 1, 1, 1, 2, 2]
    tags = [[i] * len(s) for i, s in enumerate(sentences)]
    packs = pack_rows({"tokens": sentences, "ner_tags": tags, "doc_id": docs}, max_words=8)
    expected = brute_force_packs(sentences, docs, 8)
    assert [(t, d) for t, d in zip(packs["tokens"], packs["doc_id"], strict=True)] == expected
    # tags travel with their words, in order; a 12-word sentence over the cap is a pack alone
    assert packs["ner_tags"][0] == [0] * 3 + [1] * 4 and packs["ner_tags"][1] == [2] * 2
    assert [len(t) for t in packs["tokens"]] == [7, 2, 9, 7, 12, 2]
    assert packs["sent_id"] == list(range(6))
    # every word is kept, once, in order
    assert sum(packs["tokens"], []) == sum(sentences, [])
