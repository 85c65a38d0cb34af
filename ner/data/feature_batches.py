"""Batches served from the feature cache: the stored hidden states and every other input of a
step, gathered for a whole batch at once with numpy indexing.

`batching.collate` builds a batch row by row from `datasets` rows (Python lists), and copied the
stored states window by window; with the encoder's work gone that was most of a cached step.
Here a corpus is laid out once as flat arrays (per piece, per word, with their offsets) and a
batch is a few vectorised gathers: one `np.take` per stored layer into the padded
`[K, R, P, H]` float16 block, no Python per row or window. Which sentences make a batch, and in
what order, is still the sampler's (`batching.LengthBucketSampler`): shuffling, mid-epoch resume
and DDP sharding are those of the computed path, and the batch equals `collate`'s (without
`input_ids`, which a stored batch does not need).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow.compute as pc
import torch
from torch.utils.data import Dataset

from ner.data.word_inputs import WordTable, ragged


def expand(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranges `starts[i] .. starts[i] + counts[i]` concatenated, and the run of each item."""
    run = np.repeat(np.arange(len(counts)), counts)
    before = np.cumsum(counts) - counts
    return starts[run] + np.arange(int(counts.sum())) - before[run], run


def _flat(column, depth: int) -> np.ndarray:
    for _ in range(depth):
        column = pc.list_flatten(column)
    return column.to_numpy(zero_copy_only=False).astype(np.int64)


def _starts(column) -> np.ndarray:
    """Offsets `[rows + 1]` of a list column's items."""
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


class FeatureBatches(Dataset):
    """A tokenized split (`ner.data.dataset.tokenize_dataset`) with its
    `feature_cache.FeatureStore`, indexed by whole batches: `__getitems__(sentence indices)` is
    the finished batch, so the loader's `collate_fn` is `ready`. `word_inputs`: the per-word
    inputs the model reads (`word_inputs.WORD_INPUTS`), computed for the whole corpus here, once."""

    def __init__(self, dataset, store, word_inputs: Sequence[str] = ()):
        table = dataset.with_format("arrow")
        self.store, self.layers = store, tuple(store.layers)
        self.piece_word = _flat(table["piece_word"], 2)  # [pieces], the store's piece order
        if len(self.piece_word) != int(store.offsets[-1]):
            raise ValueError("the feature store does not hold this dataset's windows")
        self.word_start = _starts(table["ner_tags"])  # [sentences + 1]
        self.tags = _flat(table["ner_tags"], 1)  # [words]
        names = table.column_names
        rows = len(self.word_start) - 1
        self.sent_id = _flat(table["sent_id"], 0) if "sent_id" in names else np.arange(rows)
        self.word_inputs = tuple(word_inputs)
        # per word of the corpus, what the model's word features read (once per distinct word)
        words = pc.list_flatten(table["tokens"]).to_pylist() if self.word_inputs else []
        self.words = WordTable(words, self.word_inputs)

    def __len__(self) -> int:
        return len(self.word_start) - 1

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])

    def __getitems__(self, indices: Sequence[int]) -> dict[str, Any]:
        """The batch of these sentences, in this order (docs/design.md, `features` included)."""
        rows = np.asarray(indices, dtype=np.int64)
        batch = self._words(rows)
        batch.update(self._pieces(rows, batch["labels"].shape[1]))
        return batch

    def _words(self, rows: np.ndarray) -> dict[str, Any]:
        counts = self.word_start[rows + 1] - self.word_start[rows]
        pos, valid = ragged(self.word_start[rows], counts, int(counts.max()))  # [B, W]
        batch = {
            "labels": torch.from_numpy(np.where(valid, self.tags[pos], -100)),
            "word_mask": torch.from_numpy(valid),
            "sent_id": torch.from_numpy(self.sent_id[rows]),
        }
        batch.update(self.words.batch(pos, valid))
        return batch

    def _pieces(self, rows: np.ndarray, num_words: int) -> dict[str, Any]:
        first, offsets = self.store.first_window, self.store.offsets
        windows, owner = expand(first[rows], first[rows + 1] - first[rows])  # [R] each
        lengths = offsets[windows + 1] - offsets[windows]
        pos, valid = ragged(offsets[windows], lengths, int(lengths.max()))  # [R, P]
        word = self.piece_word[pos]
        piece_word = np.where(valid & (word >= 0), word + owner[:, None] * num_words, -1)
        arrays = self.store.arrays
        features = np.empty((len(arrays), *pos.shape, arrays[0].shape[1]), dtype=np.float16)
        for k, layer in enumerate(arrays):
            # one gather a layer, written in place: [R * P, H] view of the [R, P, H] block
            np.take(layer, pos.reshape(-1), axis=0, out=features[k].reshape(-1, layer.shape[1]))
        # zeros, not whatever piece 0 holds: what a batch contains must not depend on the store
        features[:, ~valid] = 0
        return {
            "attention_mask": torch.from_numpy(valid.astype(np.int64)),
            "piece_word": torch.from_numpy(piece_word),
            "features": torch.from_numpy(features),  # [K, R, P, H] float16
            "feature_layers": self.layers,
        }


def ready(batch: dict[str, Any]) -> dict[str, Any]:
    """The `collate_fn` of a loader over `FeatureBatches`: its batches come finished."""
    return batch
