"""Inference rows of one fixed shape: several sentences' windows packed side by side in each row.

Length-sorted batches give every batch its own matrix height, so the first pass over a file
meets dozens of shapes, and CPU kernels (oneDNN) build their primitives for each new one. Packed,
a row holds as many windows as fit in `row_pieces`; each window keeps its own special pieces and
positions from the start (`position_ids`), and a block-diagonal attention mask (`segments`) lets
no window see another, so each is encoded as it would be alone. Batches have `row_pieces` columns
and a power-of-two number of rows: a handful of shapes, which a model can warm up when it loads.

A sentence whose window is longer than `row_pieces`, or that has several windows, goes through the
plain length-sorted batches. Packing is for inference: training keeps its own batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ner.data.batching import batches_by_length, collate, word_columns

ROW_PIECES = 64  # columns of a packed row: most sentences of news or tweets fit with room to share
PIECES_STEP = 16  # a batch's columns: its fullest row's pieces rounded up to a multiple of this


def pack_rows(lengths: Sequence[int], row_pieces: int, most: int | None = None) -> list[list[int]]:
    """Best-fit decreasing: the indices of the windows of each row, every length <= `row_pieces`,
    at most `most` windows a row. Longest first, each into the fullest row it still fits."""
    by_room: list[list[int]] = [[] for _ in range(row_pieces + 1)]  # free pieces -> rows
    rows: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        need = lengths[i]
        room = next((r for r in range(need, row_pieces + 1) if by_room[r]), None)
        if room is None:
            row, room = len(rows), row_pieces
            rows.append([])
        else:
            row = by_room[room].pop()
        rows[row].append(i)
        if most is None or len(rows[row]) < most:
            by_room[room - need].append(row)
    return rows


def rounded_rows(rows: int) -> int:
    """The rows of a batch of `rows` packed rows: 1, 2, or the next multiple of 4 (few shapes;
    a cut-short batch wastes under 4 rows)."""
    return rows if rows <= 2 else -(-rows // 4) * 4


def rounded_pieces(pieces: int, row_pieces: int = ROW_PIECES) -> int:
    """The columns of a batch whose fullest row holds `pieces`: the next multiple of
    `PIECES_STEP`, at most `row_pieces`. Rows are usually nearly full, so most batches are
    `row_pieces` wide; a lone short request is not padded to a full row."""
    return min(row_pieces, -(-pieces // PIECES_STEP) * PIECES_STEP)


def packed_batches(
    lengths: Sequence[int], row_pieces: int, max_pieces: int, batch_size: int | None = None
) -> list[list[int]]:
    """The sentence indices of each packed batch over one-window sentences of `lengths` pieces:
    as many rows of `row_pieces` as `max_pieces` allows (at least 1) and at most `batch_size`
    sentences (a row is never split)."""
    most = max(1, max_pieces // row_pieces)
    batches, group, sentences = [], [], 0
    for row in pack_rows(lengths, row_pieces, batch_size):
        if group and (len(group) == most or (batch_size and sentences + len(row) > batch_size)):
            batches.append([i for r in group for i in r])
            group, sentences = [], 0
        group.append(row)
        sentences += len(row)
    if group:
        batches.append([i for r in group for i in r])
    return batches


def packable(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether every sentence of `rows` has one window of at most `ROW_PIECES` pieces."""
    return all(len(r["input_ids"]) == 1 and len(r["input_ids"][0]) <= ROW_PIECES for r in rows)


def inference_batches(
    lengths: Sequence[int],
    windows: Sequence[int],
    batch_size: int | None,
    max_pieces: int,
    pack: bool,
) -> list[list[int]]:
    """The sentence indices of each inference batch over sentences of `windows` windows of at
    most `lengths` pieces: those of one short window packed (`pack`), the others length-sorted
    as `batches_by_length` cuts them. `ner tag` and `ner predict` batch alike through it."""
    short = [
        i for i, (n, w) in enumerate(zip(lengths, windows, strict=True))
        if pack and w == 1 and n <= ROW_PIECES
    ]  # fmt: skip
    packed = packed_batches([lengths[i] for i in short], ROW_PIECES, max_pieces, batch_size)
    batches = [[short[i] for i in batch] for batch in packed]
    taken = set(short)
    rest = [i for i in range(len(lengths)) if i not in taken]
    plain = batches_by_length(
        [lengths[i] for i in rest], batch_size, max_pieces, [windows[i] for i in rest]
    )
    return batches + [[rest[i] for i in batch] for batch in plain]


def collate_inference(
    rows: list[dict[str, Any]], pad_id: int = 0, word_inputs: Sequence[str] = (), pack=False
) -> dict[str, torch.Tensor]:
    """An inference batch: packed (`collate_packed`) where `pack` and every sentence fits a
    row, else as `collate`. The layout comes from the rows alone, so any caller that batches
    the same sentences together gets the same tensors."""
    if not (pack and packable(rows)):
        return collate(rows, pad_id, word_inputs)
    return collate_packed(rows, pack_rows([len(r["input_ids"][0]) for r in rows], ROW_PIECES),
                          pad_id, word_inputs)  # fmt: skip


def collate_packed(
    rows: list[dict[str, Any]],
    layout: list[list[int]],
    pad_id: int = 0,
    word_inputs: Sequence[str] = (),
    row_pieces: int = ROW_PIECES,
) -> dict[str, torch.Tensor]:
    """A batch like `ner.data.batching.collate`'s over one-window sentences `rows`, their windows
    placed side by side as `layout` says (the indices into `rows` of each packed row) in
    `rounded_rows` rows of `row_pieces`, with `position_ids` (each window's from 0; the encoder
    adds where it starts counting, `ner.modules.encoder.hidden_states`) and `segments` (the
    window of each piece in its row, 1..k; 0: padding, which attends only to padding)."""
    num_words = max(len(r["ner_tags"]) for r in rows)  # W
    filled = max((sum(len(rows[b]["input_ids"][0]) for b in row) for row in layout), default=1)
    shape = (rounded_rows(len(layout)), rounded_pieces(filled, row_pieces))
    input_ids = torch.full(shape, pad_id, dtype=torch.long)  # [R, L]
    piece_word = torch.full(shape, -1, dtype=torch.long)  # [R, L] flat b * W + w
    positions = torch.zeros(shape, dtype=torch.long)  # [R, L]
    segments = torch.zeros(shape, dtype=torch.long)  # [R, L]
    for r, row in enumerate(layout):
        at = 0
        for segment, b in enumerate(row, start=1):
            (ids,), (pw,) = rows[b]["input_ids"], rows[b]["piece_word"]  # one window each
            n = len(ids)
            if at + n > shape[1]:
                raise ValueError(f"row {r}: {at + n} pieces do not fit in {shape[1]}")
            input_ids[r, at : at + n] = torch.tensor(ids)
            piece_word[r, at : at + n] = torch.tensor(
                [w + b * num_words if w >= 0 else -1 for w in pw]
            )
            positions[r, at : at + n] = torch.arange(n)
            segments[r, at : at + n] = segment
            at += n
    batch = {
        "input_ids": input_ids,
        "attention_mask": (segments > 0).long(),  # [R, L]: the pieces that are real
        "piece_word": piece_word,
        "position_ids": positions,
        "segments": segments,
    }
    batch.update(word_columns(rows, num_words, word_inputs))
    return batch


@dataclass(frozen=True)
class InferenceBatching:
    """How inference forms batches: `batch_size` sentences and `max_pieces` padded pieces at
    most, short sentences packed (`pack`). `ner tag` and `ner predict` share one, so they form
    the same batches and write the same bytes."""

    batch_size: int | None
    max_pieces: int
    pack: bool

    def batches(self, lengths: Sequence[int], windows: Sequence[int]) -> list[list[int]]:
        """The sentence indices of each batch (`inference_batches`)."""
        return inference_batches(lengths, windows, self.batch_size, self.max_pieces, self.pack)

    def collate(self, rows: list[dict[str, Any]], pad_id: int = 0, word_inputs=()) -> dict:
        """One batch of `rows` (`collate_inference`)."""
        return collate_inference(rows, pad_id, word_inputs, self.pack)
