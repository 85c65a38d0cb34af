"""Word features beside the encoder: learned vectors of what each word looks like (its casing
class, optionally its characters), concatenated to the pooled word vectors before the head.

An uncased encoder (the bundled MiniLM) never sees case: "Paris", "PARIS" and "paris" are the
same pieces. Reimers & Gurevych (2017) found a casing embedding the word feature that matters
most for NER; a character CNN over the word's UTF-8 bytes (Ma & Hovy 2016) is the option.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ner.corpus.shapes import SHAPES

NUM_BYTES = 257  # UTF-8 byte + 1; 0 pads


class WordFeatures(nn.Module):
    """`casing_dim` > 0: an embedding of the casing class (`ner.corpus.shapes.SHAPES`);
    `char_dim` > 0: byte embeddings of that size, `char_filters` convolutions of width
    `char_kernel`, max-pooled over the word. Output: `[batch, words, casing_dim +
    char_filters]` (0 when both are off)."""

    def __init__(
        self,
        casing_dim: int = 16,
        char_dim: int = 0,
        char_filters: int = 50,
        char_kernel: int = 3,
        dropout: float = 0.0,
    ):
        """Args:
        casing_dim: size of the casing-class embedding (0: none).
        char_dim: size of the byte embedding of the character CNN (0: no character features).
        char_filters: convolution filters of the character CNN (its output size).
        char_kernel: width of the character convolutions, in bytes.
        dropout: dropout on the features.
        """
        super().__init__()
        self.casing_dim, self.char_dim = casing_dim, char_dim
        self.char_filters, self.char_kernel, self.dropout = char_filters, char_kernel, dropout
        self.casing = nn.Embedding(len(SHAPES), casing_dim, padding_idx=0) if casing_dim else None
        self.chars = None
        if char_dim:
            self.chars = nn.Embedding(NUM_BYTES, char_dim, padding_idx=0)
            self.conv = nn.Conv1d(char_dim, char_filters, char_kernel, padding=char_kernel // 2)
        self.drop = nn.Dropout(dropout)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The per-word batch inputs this module reads (built by `ner.data.batching.collate`)."""
        return (("word_shape",) if self.casing is not None else ()) + (
            ("word_chars",) if self.chars is not None else ()
        )

    def output_dim(self) -> int:
        return (self.casing_dim if self.casing is not None else 0) + (
            self.char_filters if self.chars is not None else 0
        )

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """`[batch, words, output_dim]` from `word_shape [B, W]` and/or `word_chars [B, W, L]`."""
        parts = []
        if self.casing is not None:
            parts.append(self.casing(batch["word_shape"]))  # [B, W, casing_dim]
        if self.chars is not None:
            parts.append(self.characters(batch["word_chars"]))  # [B, W, filters]
        if not parts:
            shape = batch["word_mask"].shape
            return batch["word_mask"].new_zeros((*shape, 0), dtype=torch.float)
        return self.drop(torch.cat(parts, dim=-1))

    def characters(self, chars: Tensor) -> Tensor:
        """`[B, W, char_filters]` from the bytes `[B, W, L]` of each word; padding words: 0."""
        sentences, words, length = chars.shape
        if sentences * words * length == 0:
            # a batch of empty texts has no word (or no byte): nothing to convolve, and
            # `view(-1, ...)` of 0 elements is ambiguous
            return self.conv.weight.new_zeros(sentences, words, self.char_filters)
        flat = self.chars(chars.reshape(sentences * words, length)).transpose(1, 2)
        # flat: [B*W, char_dim, L]
        conv = self.conv(flat)[..., :length]  # [B*W, filters, L]
        pad = (chars.reshape(sentences * words, 1, length) == 0).expand_as(conv)
        pooled = conv.masked_fill(pad, float("-inf")).amax(-1)  # [B*W, filters]
        pooled = torch.where(torch.isinf(pooled), 0.0, pooled)  # padding words: 0
        return pooled.reshape(sentences, words, self.char_filters)  # [B, W, filters]
