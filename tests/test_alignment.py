"""The word-piece alignment routine: ownership, windows, context, zero-piece words, BPE."""

from __future__ import annotations

import random

import pytest
from helpers import TINY_WORDS, align_sentences

from ner.data.alignment import build_windows, special_tokens, tokenize_words
from ner.data.pretrained import load_tokenizer
from ner.utils.errors import NERError

ZERO_PIECE = ["\u200b", "\x00", "\u00ad", "\u0301"]


def random_word(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.5:
        return rng.choice(TINY_WORDS)
    if roll < 0.6:
        return rng.choice(ZERO_PIECE)
    letters = "abcdefghijklmnopqrstuvwxyzABCXYZ.,-"
    return "".join(rng.choice(letters) for _ in range(rng.randint(1, 12)))


def random_documents(seed: int, max_words: int) -> list[list[list[str]]]:
    rng = random.Random(seed)
    return [
        [
            [random_word(rng) for _ in range(rng.randint(1, max_words))]
            for _ in range(rng.randint(1, 5))
        ]
        for _ in range(8)
    ]


def pieces_alone(tokenizer, words: list[str]) -> list[list[int]]:
    """Reference: the sentence tokenized on its own, pieces grouped per word; nothing -> [unk]."""
    enc = tokenizer(words, is_split_into_words=True, add_special_tokens=False)
    out: list[list[int]] = [[] for _ in words]
    for piece, word in zip(enc["input_ids"], enc.word_ids(), strict=True):
        if word is not None:
            out[word].append(piece)
    return [p or [tokenizer.unk_token_id] for p in out]


@pytest.mark.parametrize("stride", [None, 3, 50])
@pytest.mark.parametrize("context", [0, 5])
def test_random_sentences_keep_every_word(tiny_tokenizer, stride, context):
    max_length = 16
    prefix, suffix = special_tokens(tiny_tokenizer)
    budget = max_length - len(prefix) - len(suffix)
    # up to 40 words of up to ~6 pieces: many sentences are several times longer than a window
    documents = random_documents(seed=7, max_words=40)
    aligned, _ = align_sentences(tiny_tokenizer, documents, max_length, stride, context)
    long_sentences = 0
    for doc, doc_aligned in zip(documents, aligned, strict=True):
        assert len(doc_aligned) == len(doc)
        for words, sent in zip(doc, doc_aligned, strict=True):
            expected = [p[:budget] for p in pieces_alone(tiny_tokenizer, words)]
            assert sent.num_pieces == sum(map(len, expected))
            long_sentences += sent.num_pieces >= 3 * budget
            owned: dict[int, list[int]] = {}
            owners: dict[int, set[int]] = {}
            for r, (ids, pw) in enumerate(zip(sent.input_ids, sent.piece_word, strict=True)):
                assert len(ids) == len(pw) <= max_length
                assert ids[: len(prefix)] == prefix and ids[len(ids) - len(suffix) :] == suffix
                assert set(pw[: len(prefix)]) == set(pw[len(pw) - len(suffix) :]) == {-1}
                for piece, word in zip(ids, pw, strict=True):
                    if word >= 0:
                        owned.setdefault(word, []).append(piece)
                        owners.setdefault(word, set()).add(r)
            assert sorted(owned) == list(range(len(words)))  # one position per word, none lost
            assert all(len(r) == 1 for r in owners.values())  # exactly one owner window
            assert [owned[w] for w in range(len(words))] == expected
    assert long_sentences > 5


def test_windows_start_and_end_on_word_boundaries(tiny_tokenizer):
    max_length, stride = 12, 4
    prefix, suffix = special_tokens(tiny_tokenizer)
    for doc in random_documents(seed=3, max_words=30):
        (aligned,), _ = align_sentences(tiny_tokenizer, [doc], max_length, stride)
        for words, sent in zip(doc, aligned, strict=True):
            expected = [p[:10] for p in pieces_alone(tiny_tokenizer, words)]
            bounds = [0]
            for p in expected:
                bounds.append(bounds[-1] + len(p))
            flat = [p for word in expected for p in word]
            spans = [(-1, 0)]  # (first piece, end piece) of each window, after a sentinel
            for ids in sent.input_ids:
                core = ids[len(prefix) : len(ids) - len(suffix)]
                # the first word start after the previous window's start where the core matches
                a = next(
                    a for a in bounds[:-1] if a > spans[-1][0] and flat[a : a + len(core)] == core
                )
                assert a + len(core) in bounds
                spans.append((a, a + len(core)))
            spans = spans[1:]
            assert spans[0][0] == 0 and spans[-1][1] == len(flat)
            for (a0, b0), (a1, _) in zip(spans, spans[1:], strict=False):
                assert a0 < a1 <= b0  # advancing, no gap
                first_word = bounds.index(a0)
                assert a1 - a0 <= max(stride, len(expected[first_word]))


def test_owner_is_the_window_with_most_context_on_both_sides():
    # 10 one-piece words, budget 4, stride 2: windows over words [0,4) [2,6) [4,8) [6,10)
    doc = [[[10 + w] for w in range(10)]]
    (sent,) = build_windows(doc, [1], [2], max_length=6, stride=2, context_pieces=0)
    assert sent.input_ids == [
        [1, 10, 11, 12, 13, 2],
        [1, 12, 13, 14, 15, 2],
        [1, 14, 15, 16, 17, 2],
        [1, 16, 17, 18, 19, 2],
    ]
    assert sent.piece_word == [
        [-1, 0, 1, 2, -1, -1],
        [-1, -1, 3, 4, -1, -1],
        [-1, -1, 5, 6, -1, -1],
        [-1, -1, 7, 8, 9, -1],
    ]
    # uneven pieces: word 1 (3 pieces) has 1 piece on each side in window 0, none left in window 1;
    # word 2 has (4, 0) in window 0, (3, 1) in window 1, (0, 2) in window 2
    doc = [[[5], [6, 6, 6], [7], [8], [9]]]
    (sent,) = build_windows(doc, [1], [2], max_length=7, stride=1, context_pieces=0)
    assert sent.input_ids == [[1, 5, 6, 6, 6, 7, 2], [1, 6, 6, 6, 7, 8, 2], [1, 7, 8, 9, 2]]
    assert sent.piece_word == [
        [-1, 0, 1, 1, 1, -1, -1],
        [-1, -1, -1, -1, 2, -1, -1],
        [-1, -1, 3, 4, -1],
    ]


def test_context_stays_in_the_document_and_owns_nothing():
    # pieces are globally unique so every context piece can be traced to its sentence
    docs = [[[[100 * d + 10 * s + w] for w in range(3)] for s in range(3)] for d in range(2)]
    for doc_index, doc in enumerate(docs):
        out = build_windows(doc, [1], [2], max_length=12, stride=None, context_pieces=4)
        flat = [p[0] for sent in doc for p in sent]
        for s, sent in enumerate(out):
            (ids,), (pw,) = sent.input_ids, sent.piece_word
            core = [p[0] for p in doc[s]]
            left, right = flat[: 3 * s][-4:], flat[3 * s + 3 :][:4]
            assert ids == [1] + left + core + right + [2]
            assert pw == [-1] * (1 + len(left)) + [0, 1, 2] + [-1] * (len(right) + 1)
            assert all(p // 100 == doc_index for p in ids[1:-1])


def test_context_shares_a_short_budget():
    doc = [[[11], [12], [13]], [[21], [22]], [[31], [32], [33]]]
    (_, mid, _) = build_windows(doc, [1], [2], max_length=7, stride=None, context_pieces=5)
    assert mid.input_ids == [
        [1, 12, 13, 21, 22, 31, 2]
    ]  # 3 free pieces: 2 left (the rest), 1 right
    assert mid.piece_word == [[-1, -1, -1, 0, 1, -1, -1]]


def test_long_word_keeps_its_first_pieces_and_empty_sentence_keeps_specials():
    (long, empty) = build_windows([[[7], list(range(100, 120)), [8]], []], [1], [2], 8, None, 0)
    # budget 6: the 20-piece word keeps 6 pieces and fills a window of its own
    assert long.input_ids == [[1, 7, 2], [1, 100, 101, 102, 103, 104, 105, 2], [1, 8, 2]]
    owned = [w for pw in long.piece_word for w in pw if w >= 0]
    assert owned == [0, 1, 1, 1, 1, 1, 1, 2] and long.num_pieces == 8
    assert empty.input_ids == [[1, 2]] and empty.piece_word == [[-1, -1]] and empty.num_pieces == 0
    with pytest.raises(NERError):
        build_windows([[[7]]], [1], [2], 2, None, 0)


def test_zero_piece_words_become_unk(tiny_tokenizer):
    words = ["john", *ZERO_PIECE, "smith"]
    pieces, zero = tokenize_words(tiny_tokenizer, [words, ["paris"]])
    unk, vocab = tiny_tokenizer.unk_token_id, tiny_tokenizer.get_vocab()
    assert zero == 4
    assert pieces == [
        [[vocab["john"]], [unk], [unk], [unk], [unk], [vocab["smith"]]],
        [[vocab["paris"]]],
    ]
    assert tokenize_words(tiny_tokenizer, []) == ([], 0)


def test_special_tokens_and_default_length(tiny_tokenizer):
    assert special_tokens(tiny_tokenizer) == (
        [tiny_tokenizer.cls_token_id],
        [tiny_tokenizer.sep_token_id],
    )
    aligned, _ = align_sentences(tiny_tokenizer, [[["john"] * 600]])
    assert max(len(ids) for ids in aligned[0][0].input_ids) == 512


def test_byte_level_bpe(tmp_path):
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    corpus = ["john smith visited paris today", "the bank of new york said it met mary"] * 5
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe.train_from_iterator(corpus, vocab_size=400, min_frequency=1, special_tokens=specials)
    bpe.save_model(str(tmp_path))
    from transformers import RobertaTokenizerFast

    RobertaTokenizerFast(
        str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt")
    ).save_pretrained(tmp_path)
    tokenizer = load_tokenizer(str(tmp_path))
    assert "add_prefix_space=True" in repr(tokenizer.backend_tokenizer.pre_tokenizer)
    words = ["john", "Smithers", "visited", "\u200b", "paris"]
    pieces, zero = tokenize_words(tokenizer, [words])
    # each word is tokenized as if it followed a space, as in running text
    assert pieces[0] == [tokenizer(" " + w, add_special_tokens=False)["input_ids"] for w in words]
    assert zero == 0 and pieces[0][4] == [tokenizer.get_vocab()["Ġparis"]]
    assert special_tokens(tokenizer) == ([tokenizer.bos_token_id], [tokenizer.eos_token_id])
    ((sent,),), _ = align_sentences(tokenizer, [[words]], max_length=6)
    owned = [
        [
            p
            for ids, pw in zip(sent.input_ids, sent.piece_word, strict=True)
            for p, w in zip(ids, pw, strict=True)
            if w == i
        ]
        for i in range(5)
    ]
    assert owned == [p[:4] for p in pieces[0]]


def test_load_tokenizer_bert(tiny_model_dir):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    assert tokenizer.is_fast and len(tokenizer) > 100
