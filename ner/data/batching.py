"""Batches: collate tokenized rows into padded tensors, length-bucketed batch order, sampler."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow.compute as pc
import torch
from lightning_fabric.utilities.apply_func import move_data_to_device
from torch import Tensor
from torch.utils.data import DataLoader, Sampler

from ner.data.word_inputs import batch_word_inputs


def collate(
    rows: list[dict[str, Any]], pad_id: int = 0, word_inputs: Sequence[str] = ()
) -> dict[str, Tensor]:
    """One batch (docs/design.md) from tokenized rows (`input_ids`, `piece_word`, `ner_tags`,
    optional `sent_id`), padded to this batch's longest window and sentence only (batches of
    stored hidden states: `ner.data.feature_batches`). `word_inputs` (`word_shape`, `word_chars`)
    are computed from the rows' `tokens` for a model's word features."""
    num_words = max(len(r["ner_tags"]) for r in rows)  # W
    windows = [
        (b, ids, pw)
        for b, r in enumerate(rows)
        for ids, pw in zip(r["input_ids"], r["piece_word"], strict=True)
    ]
    pieces = max(len(ids) for _, ids, _ in windows)  # P
    input_ids, piece_word, mask = [], [], []
    for b, ids, pw in windows:
        pad = pieces - len(ids)
        input_ids.append(list(ids) + [pad_id] * pad)
        piece_word.append([w + b * num_words if w >= 0 else -1 for w in pw] + [-1] * pad)
        mask.append([1] * len(ids) + [0] * pad)
    batch = {
        "input_ids": torch.tensor(input_ids, dtype=torch.long),  # [R, P]
        "attention_mask": torch.tensor(mask, dtype=torch.long),  # [R, P]
        "piece_word": torch.tensor(piece_word, dtype=torch.long),  # [R, P] flat b * W + w
    }
    batch.update(word_columns(rows, num_words, word_inputs))
    return batch


def word_columns(
    rows: list[dict[str, Any]], num_words: int, word_inputs: Sequence[str] = ()
) -> dict[str, Tensor]:
    """The per-sentence and per-word tensors of a batch of `rows` padded to `num_words` words:
    `labels`, `word_mask`, `sent_id` and the `word_inputs` of word features."""
    labels = [list(r["ner_tags"]) + [-100] * (num_words - len(r["ner_tags"])) for r in rows]
    word_mask = [
        [True] * len(r["ner_tags"]) + [False] * (num_words - len(r["ner_tags"])) for r in rows
    ]
    columns = {
        "labels": torch.tensor(labels, dtype=torch.long).view(len(rows), num_words),  # [B, W]
        "word_mask": torch.tensor(word_mask, dtype=torch.bool).view(len(rows), num_words),
        "sent_id": torch.tensor([r.get("sent_id", b) for b, r in enumerate(rows)]),  # [B]
    }
    if word_inputs:
        columns.update(batch_word_inputs([r["tokens"] for r in rows], num_words, word_inputs))
    return columns


def move_batch(batch: Any, device: torch.device) -> Any:
    """`batch` on `device`: ours (a flat dict of tensors, maybe a tuple of ints) tensor by
    tensor, anything else as Lightning moves it. Lightning's generic traversal
    (`apply_to_collection`) is a visible share of a step when the step is short (cached
    features)."""
    if not isinstance(batch, dict) or not all(
        isinstance(v, Tensor) or (isinstance(v, tuple) and all(isinstance(i, int) for i in v))
        for v in batch.values()
    ):
        return move_data_to_device(batch, device)
    blocking = torch.device(device).type in ("cpu", "mps")  # as Lightning's `batch_to`
    return {
        k: v.to(device, non_blocking=not blocking) if isinstance(v, Tensor) else v
        for k, v in batch.items()
    }


# Padded pieces a batch at inference and when a frozen encoder fills the feature cache: in fp32,
# small batches stay in a CPU's caches and run as fast as large ones; bf16 matrix units (AMX)
# run faster on taller matrices; a GPU wants large ones. (NOTES.md, "Performance".)
CPU_PIECES, CPU_BF16_PIECES, GPU_PIECES = 1024, 2048, 8192


def piece_budget(device: torch.device | str, bf16: bool = False) -> int:
    """The default padded pieces a batch for a forward pass without gradients on `device`
    (`bf16`: under bf16 autocast)."""
    if torch.device(device).type != "cpu":
        return GPU_PIECES
    return CPU_BF16_PIECES if bf16 else CPU_PIECES


def batches_by_length(
    lengths: list[int],
    batch_size: int | None = 32,
    max_pieces: int | None = None,
    rows: list[int] | None = None,
) -> list[list[int]]:
    """Indices sorted by length (stable), cut into batches of at most `batch_size` sentences and
    at most `max_pieces` padded pieces (rows x longest; a sentence over the budget goes alone)."""
    batches: list[list[int]] = []
    batch: list[int] = []
    num_rows = longest = 0
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        r = rows[i] if rows is not None else 1
        full = batch_size is not None and len(batch) >= batch_size
        over = max_pieces is not None and (num_rows + r) * max(longest, lengths[i]) > max_pieces
        if batch and (full or over):
            batches.append(batch)
            batch, num_rows, longest = [], 0, 0
        batch.append(i)
        num_rows += r
        longest = max(longest, lengths[i])
    if batch:
        batches.append(batch)
    return batches


def window_lengths(windows) -> tuple[list[int], list[int]]:
    """(longest window, windows) per sentence of an arrow `input_ids` column
    `[sentences][windows][pieces]` (every sentence has at least one window)."""
    rows = pc.list_value_length(windows).to_numpy()
    pieces = pc.list_value_length(pc.list_flatten(windows)).to_numpy()  # per window
    first_row = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
    lengths = np.maximum.reduceat(pieces, first_row).tolist() if len(rows) else []
    return lengths, rows.tolist()


class LengthBucketSampler(Sampler[list[int]]):
    """Batches of similar-length sentences.

    Training (`shuffle`): sentences shuffled (seed + epoch), sorted by length inside chunks of
    `chunk_size`, batch order shuffled. Else: one global length order. Under torch.distributed each
    rank takes every world_size-th batch, the batch list first padded by repeating batches so every
    rank gets as many (evaluation: the metric and the prediction writers dedup by `sent_id`).
    Run with `Trainer(use_distributed_sampler=False)` (the `ner` commands set it).
    """

    def __init__(
        self,
        lengths: list[int],
        rows: list[int],
        batch_size: int | None,
        max_pieces: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
        chunk_size: int = 4096,
        order: Callable[[list[int], list[int]], list[list[int]]] | None = None,
    ):
        self.order = order  # (lengths, windows) -> batches, unshuffled (inference batching)
        self.lengths, self.rows = lengths, rows
        self.batch_size, self.max_pieces = batch_size, max_pieces
        self.shuffle, self.seed, self.chunk_size = shuffle, seed, chunk_size
        self.epoch = 0
        self.consumed = 0  # batches of this epoch handed to the loop (ResumableLoader counts)
        self._resume: tuple[int, int] | None = None
        self._cache: tuple[tuple[int, int, int], list[list[int]]] | None = None

    @property
    def sampler(self) -> LengthBucketSampler:
        # Lightning calls `batch_sampler.sampler.set_epoch(epoch)` each epoch (not the batch
        # sampler's own set_epoch)
        return self

    def set_epoch(self, epoch: int) -> None:
        """Vary the training order per epoch (deterministically)."""
        self.epoch = epoch

    def _all_batches(self) -> list[list[int]]:
        if not self.shuffle and self.order is not None:
            return self.order(self.lengths, self.rows)
        if not self.shuffle:
            return batches_by_length(self.lengths, self.batch_size, self.max_pieces, self.rows)
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        batches = []
        for start in range(0, len(order), self.chunk_size):
            chunk = order[start : start + self.chunk_size]
            lengths = [self.lengths[i] for i in chunk]
            rows = [self.rows[i] for i in chunk]
            for batch in batches_by_length(lengths, self.batch_size, self.max_pieces, rows):
                batches.append([chunk[j] for j in batch])
        rng.shuffle(batches)
        return batches

    def _batches(self) -> list[list[int]]:
        """This rank's batches for the current epoch."""
        rank, world = 0, 1
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        key = (self.epoch, rank, world)
        if self._cache is None or self._cache[0] != key:
            batches = self._all_batches()
            if world > 1:  # every rank gets as many batches (Lightning refuses a rank with none)
                batches += batches[: -len(batches) % world]
            self._cache = key, batches[rank::world]
        return self._cache[1]

    def state_dict(self) -> dict[str, int]:
        """Where this epoch stands: saved in checkpoints through `ResumableLoader`."""
        return {"epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Skip the batches already trained on when the saved epoch is iterated again."""
        self._resume = int(state["epoch"]), int(state["consumed"])

    def __iter__(self):
        batches = self._batches()
        skip = 0
        if self._resume is not None and self._resume[0] == self.epoch:
            skip = self._resume[1]
        self._resume, self.consumed = None, skip
        yield from batches[skip:]

    def __len__(self) -> int:
        return len(self._batches())


class ResumableLoader(DataLoader):
    """A DataLoader over a `LengthBucketSampler` whose place in the epoch goes into checkpoints
    (Lightning saves the `state_dict` of loaders that have one), so a run resumed from a
    mid-epoch checkpoint goes on with the next batch instead of starting the epoch again.

    Batches are counted as they leave the loader, not as the sampler yields them: with workers
    the sampler runs ahead of training. Each `iter()` of a DataLoader draws a worker seed from
    its generator; from the global one that would shift the dropout masks of a run resumed
    mid-epoch (its iterator is made after the restore), so the loader has its own."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("generator", torch.Generator().manual_seed(0))
        super().__init__(*args, **kwargs)

    def __iter__(self):
        sampler = self.batch_sampler
        for batch in super().__iter__():
            sampler.consumed += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        """The batch sampler's epoch and batches consumed."""
        return self.batch_sampler.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume the batch sampler at the saved batch."""
        self.batch_sampler.load_state_dict(state)
