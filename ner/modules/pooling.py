"""Word pooling: word-piece vectors -> one vector per word."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from ner.utils.errors import NERError

Mode = Literal["first", "last", "mean", "first_last"]
MODES: tuple[str, ...] = Mode.__args__


class WordPooling(nn.Module):
    """Pool each word's pieces: its `first`, `last`, `mean`, or `first_last` (concat, 2 x dim)."""

    def __init__(self, mode: Mode = "first"):
        super().__init__()
        if mode not in MODES:
            raise NERError(f"pooling.mode: {mode!r} is not one of {', '.join(MODES)}")
        self.mode = mode

    def output_dim(self, dim: int) -> int:
        return 2 * dim if self.mode == "first_last" else dim

    def forward(self, pieces: Tensor, piece_word: Tensor, num_words: int) -> Tensor:
        """`pieces [R, P, D]`, `piece_word [R, P]` (flat word index or -1) -> `[num_words, D']`.

        Words that own no piece (padding) get zeros.
        """
        flat = pieces.reshape(-1, pieces.shape[-1])  # [R*P, D]
        owner = piece_word.reshape(-1)
        keep = owner >= 0
        position = torch.arange(owner.numel(), device=owner.device)[keep]
        word = owner[keep]
        if self.mode == "mean":
            total = flat.new_zeros(num_words, flat.shape[-1]).index_add_(0, word, flat[keep])
            count = flat.new_zeros(num_words).index_add_(0, word, flat.new_ones(word.numel()))
            return total / count.clamp(min=1).unsqueeze(-1)
        parts = []
        if self.mode in ("first", "first_last"):
            parts.append(_select(flat, word, position, num_words, "amin"))
        if self.mode in ("last", "first_last"):
            parts.append(_select(flat, word, position, num_words, "amax"))
        return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]

    def words(self, pieces: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The word vectors `[B, W, D']` of a batch (`piece_word`, `word_mask [B, W]`) from its
        piece vectors `[R, P, D]`: what the tagger and `ner embed` pool alike."""
        sentences, words = batch["word_mask"].shape
        vectors = self(pieces, batch["piece_word"], sentences * words)  # [B*W, D']
        return vectors.view(sentences, words, vectors.shape[-1])  # [B, W, D']


def _select(flat: Tensor, word: Tensor, position: Tensor, num_words: int, reduce: str) -> Tensor:
    """Per word, the row of `flat` at the smallest (`amin`) or largest (`amax`) owned position."""
    # Rows are row-major over [R, P] and a word's pieces lie in one window in order, so the
    # smallest flat position is the word's first piece.
    none = -1 if reduce == "amax" else flat.shape[0]
    chosen = torch.full((num_words,), none, dtype=torch.long, device=flat.device)
    chosen.scatter_reduce_(0, word, position, reduce=reduce)
    owned = (chosen >= 0) & (chosen < flat.shape[0])
    rows = flat[chosen.clamp(0, max(flat.shape[0] - 1, 0))]
    return torch.where(owned.unsqueeze(-1), rows, rows.new_zeros(()))
