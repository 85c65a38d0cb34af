"""Word pooling against hand-computed values, for all four modes."""

from __future__ import annotations

import pytest
import torch

from ner.modules.pooling import WordPooling
from ner.utils.errors import NERError

# Two rows (windows) of 5 pieces, 2 sentences x 3 words = 6 flat word slots.
# Row 0: [CLS] w0 w0 w1 [SEP]  (sentence 0: words 0 and 1; word 2 is padding)
# Row 1: [CLS] w3 w4 w4 w4     (sentence 1: words 0 and 1 -> flat 3 and 4; flat 5 is padding)
PIECE_WORD = torch.tensor([[-1, 0, 0, 1, -1], [-1, 3, 4, 4, 4]])
NUM_WORDS = 6


def pieces() -> torch.Tensor:
    # Piece (r, p) has the vector [10 r + p, -(10 r + p)]: easy to read back.
    value = torch.arange(10, dtype=torch.float).view(2, 5)
    value[1] += 5  # row 1 holds 10..14
    return torch.stack([value, -value], dim=-1)  # [2, 5, 2]


EXPECTED = {
    "first": [[1, -1], [3, -3], [0, 0], [11, -11], [12, -12], [0, 0]],
    "last": [[2, -2], [3, -3], [0, 0], [11, -11], [14, -14], [0, 0]],
    "mean": [[1.5, -1.5], [3, -3], [0, 0], [11, -11], [13, -13], [0, 0]],
    "first_last": [
        [1, -1, 2, -2],
        [3, -3, 3, -3],
        [0, 0, 0, 0],
        [11, -11, 11, -11],
        [12, -12, 14, -14],
        [0, 0, 0, 0],
    ],
}


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_pooling_against_hand_computed_values(mode):
    pool = WordPooling(mode)
    out = pool(pieces(), PIECE_WORD, NUM_WORDS)
    assert pool.output_dim(2) == out.shape[-1] == (4 if mode == "first_last" else 2)
    assert torch.equal(out, torch.tensor(EXPECTED[mode], dtype=torch.float))


def test_default_is_first_and_gradients_reach_only_the_chosen_pieces():
    assert WordPooling().mode == "first"
    x = pieces().requires_grad_()
    WordPooling("first")(x, PIECE_WORD, NUM_WORDS).sum().backward()
    used = torch.zeros(2, 5, dtype=torch.bool)
    used[0, 1] = used[0, 3] = used[1, 1] = used[1, 2] = True
    assert torch.equal(x.grad.abs().sum(-1) > 0, used)


def test_words_split_over_rows_and_random_layouts_match_a_loop():
    # Pieces of a word lie in one window, in order; compare with a plain per-word loop.
    gen = torch.Generator().manual_seed(0)
    rows, width, num_words, dim = 4, 9, 10, 3
    piece_word = torch.full((rows, width), -1)
    word = 0
    for r in range(rows):
        p = 1
        while p < width - 1 and word < num_words - 2:
            n = int(torch.randint(1, 3, (1,), generator=gen))
            piece_word[r, p : min(p + n, width - 1)] = word
            p += n
            word += 1
    x = torch.randn(rows, width, dim, generator=gen)
    for mode in ("first", "last", "mean", "first_last"):
        out = WordPooling(mode)(x, piece_word, num_words)
        for w in range(num_words):
            owned = x[piece_word == w]
            if len(owned) == 0:
                want = torch.zeros(out.shape[-1])
            else:
                want = {
                    "first": owned[0],
                    "last": owned[-1],
                    "mean": owned.mean(0),
                    "first_last": torch.cat([owned[0], owned[-1]]),
                }[mode]
            torch.testing.assert_close(out[w], want)


def test_bad_mode_names_the_field():
    with pytest.raises(NERError, match=r"^pooling\.mode: 'max' is not one of first, last"):
        WordPooling("max")
