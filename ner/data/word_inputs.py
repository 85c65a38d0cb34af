"""Per-word model inputs (casing class, UTF-8 bytes) as arrays, computed once per distinct word.

Word features (`ner.modules.word_features`) read `word_shape [B, W]` and `word_chars [B, W, bytes]`.
Text repeats its words, so a `WordTable` classifies each distinct word once and a batch is a
numpy gather: `batching.collate` builds one per batch, the feature cache's batches one per corpus.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ner.corpus.shapes import CHAR_PAD, MAX_BYTES, shape_ids

# the per-word batch inputs a model's word features may ask for (`WordFeatures.inputs`)
WORD_INPUTS = ("word_shape", "word_chars")


def ragged(starts: np.ndarray, lengths: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Runs `starts[i] .. starts[i] + lengths[i]` padded to `width`: positions `[n, width]`
    (padding points at 0, a valid index of any non-empty array) and where they are real."""
    column = np.arange(width)
    valid = column < lengths[:, None]  # [n, width]
    return np.where(valid, starts[:, None] + column, 0), valid


class WordTable:
    """`inputs` (of `WORD_INPUTS`) for each of `words`, computed once per distinct word."""

    def __init__(self, words: Sequence[str], inputs: Sequence[str]):
        unknown = set(inputs) - set(WORD_INPUTS)
        if unknown:
            raise ValueError(f"unknown word inputs {sorted(unknown)} (known: {WORD_INPUTS})")
        self.inputs = tuple(inputs)
        distinct = {w: i for i, w in enumerate(dict.fromkeys(words))}
        which = np.fromiter(map(distinct.__getitem__, words), np.int64, len(words))  # [words]
        if "word_shape" in self.inputs:
            self.shapes = np.asarray(shape_ids(list(distinct)), dtype=np.int64)[which]  # [words]
        if "word_chars" in self.inputs:
            self.chars, self.char_len = (x[which] for x in _bytes(list(distinct)))

    def batch(self, pos: np.ndarray, valid: np.ndarray) -> dict[str, Tensor]:
        """The inputs of the words at `pos [B, W]` (indices into `words`), 0 where not `valid`."""
        out = {}
        if "word_shape" in self.inputs:
            out["word_shape"] = torch.from_numpy(np.where(valid, self.shapes[pos], 0))  # [B, W]
        if "word_chars" in self.inputs:
            longest = int(self.char_len[pos[valid]].max(initial=1))
            chars = np.where(valid[..., None], self.chars[pos, :longest], 0)  # [B, W, bytes]
            out["word_chars"] = torch.from_numpy(chars.astype(np.int64))
        return out


def _bytes(words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """`ner.corpus.shapes.byte_ids` of each word as `[words, MAX_BYTES]` int16 and its id count
    (at least 1: an empty word is one padding id), all words encoded in one buffer."""
    encoded = [w.encode("utf-8", "surrogatepass")[:MAX_BYTES] for w in words]
    length = np.fromiter(map(len, encoded), np.int64, len(encoded))  # [words]
    flat = np.frombuffer(b"".join(encoded) or bytes(1), np.uint8).astype(np.int16) + 1
    pos, valid = ragged(np.cumsum(length) - length, length, MAX_BYTES)  # [words, MAX_BYTES]
    return np.where(valid, flat[pos], CHAR_PAD).astype(np.int16), np.maximum(length, 1)


def batch_word_inputs(
    tokens: list[list[str]], num_words: int, inputs: Sequence[str]
) -> dict[str, Tensor]:
    """`inputs` of a batch of sentences `tokens`, padded to `num_words` words."""
    counts = np.fromiter(map(len, tokens), np.int64, len(tokens))  # [B]
    table = WordTable([w for words in tokens for w in words], inputs)
    pos, valid = ragged(np.cumsum(counts) - counts, counts, num_words)  # [B, W]
    return table.batch(pos, valid)
