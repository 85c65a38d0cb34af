"""Inference over any number of sentences in bounded memory: THE routine behind `tagger.predict`,
`ner tag`, `ner embed` and (batch by batch) `ner predict` and `ner test`.

Sentences are aligned with the model's recorded window settings (`ner.data.alignment.align_rows`, so
long sentences, zero-piece words and document context are handled as in training), collated as
the data module collates them, run in length-sorted batches under a piece budget, and the
results come back in input order.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor, nn

from ner.corpus.text import entities_from_tags, words_and_offsets
from ner.data.alignment import align_rows
from ner.data.batching import piece_budget
from ner.data.row_packing import PIECES_STEP, ROW_PIECES, InferenceBatching, rounded_rows
from ner.data.windows import WindowSettings
from ner.inference.consistency import decode_documents, sentence_outputs
from ner.modules.encoder import position_start
from ner.utils.precision import autocast, bf16_inference, linears_in_bf16

T = TypeVar("T")
Tagged = tuple[list[str], list[float]]  # IOB2 tags and per-word scores of one sentence


class Tagger(Protocol):
    """What inference needs of a model: `ner.model.tagger.NERTagger` is one."""

    tokenizer: Any
    labels: list[str]
    window_settings: WindowSettings
    word_inputs: tuple[str, ...]  # per-word batch inputs of its word features
    head: Any  # `.decode(emissions, word_mask) -> (tags, scores)`

    def __call__(self, batch: dict[str, Tensor]) -> Tensor: ...

    def parameters(self) -> Iterator[Tensor]: ...

    def eval(self) -> Any: ...


# Sentences aligned and tagged at a time: memory follows this, not the input's length.
CHUNK_SIZE = 4096
BATCH_SIZE = 64  # sentences a batch at most, unless asked otherwise


def decode_batch(model: Tagger, batch: dict[str, Tensor]) -> list[Tagged]:
    """(IOB2 tags, per-word scores) for each sentence of a collated batch, in batch order."""
    emissions = model(batch).float()  # [batch, words, labels]
    tags, scores = model.head.decode(emissions, batch["word_mask"])
    lengths = batch["word_mask"].sum(1).tolist()
    return [
        ([model.labels[x] for x in row[:n]], score[:n])
        for row, score, n in zip(tags.tolist(), scores.tolist(), lengths, strict=True)
    ]


def _chunks(
    sentences: Iterable[Sequence[str]], doc_ids: Iterable[int] | None, size: int
) -> Iterator[tuple[list[list[str]], list[int]]]:
    """Runs of `size` sentences (more to finish a document) with their document ids."""
    if doc_ids is None:  # every sentence its own document: a run ends as soon as it is full
        it = iter(sentences)
        start = 0
        while chunk := [list(s) for s in itertools.islice(it, size)]:
            yield chunk, list(range(start, start + len(chunk)))
            start += len(chunk)
        return
    chunk: list[list[str]] = []
    chunk_ids: list[int] = []
    for sentence, doc in zip(sentences, doc_ids, strict=True):
        if len(chunk) >= size and doc != chunk_ids[-1]:
            yield chunk, chunk_ids
            chunk, chunk_ids = [], []
        chunk.append(list(sentence))
        chunk_ids.append(doc)
    if chunk:
        yield chunk, chunk_ids


def map_batches(
    model: Tagger,
    fn: Callable[[dict[str, Tensor]], list[T]],
    sentences: Iterable[Sequence[str]],
    doc_ids: Iterable[int] | None = None,
    settings: WindowSettings | None = None,
    batch_size: int | None = BATCH_SIZE,
    max_pieces: int | None = None,
    chunk_size: int = CHUNK_SIZE,
    bf16: bool | None = None,
    packed: bool | None = None,
) -> Iterator[T]:
    """`fn(batch)` (one result a batch row) over every sentence, yielded in input order.

    `doc_ids`: the document of each sentence (consecutive equal ids: sentences of one document,
    each other's context); None: every sentence its own document. `settings`: None: the model's.
    `max_pieces`: padded pieces a batch (None: `ner.data.batching.piece_budget`). `bf16`:
    autocast in bf16 (None: where the device runs it fast, see `ner.utils.precision`).
    `packed`: short sentences packed into rows of one shape (`ner.data.row_packing`; None: where
    the model allows it; False: length-sorted batches only, as training evaluates).
    """
    settings = settings or model.window_settings
    device = next(model.parameters()).device
    bf16 = bf16_inference(device, bf16)
    batching = inference_batching(model, device, batch_size, max_pieces, bf16, packed)
    pad_id = model.tokenizer.pad_token_id or 0
    model.eval()
    # a model that runs its own torch forward: its linear layers held in bf16 (same results)
    own = bf16 and isinstance(model, nn.Module) and getattr(model, "runtime", None) is None
    for chunk, chunk_ids in _chunks(sentences, doc_ids, chunk_size):
        aligned = align_rows(model.tokenizer, chunk, chunk_ids, settings)
        rows = [
            {
                "input_ids": ids,
                "piece_word": pw,
                "ner_tags": [-100] * len(words),
                "sent_id": i,
                "tokens": words,
            }
            for i, (ids, pw, words) in enumerate(
                zip(aligned["input_ids"], aligned["piece_word"], chunk, strict=True)
            )
        ]
        results: list[Any] = [None] * len(rows)
        held = linears_in_bf16(model) if own else contextlib.nullcontext()
        with torch.inference_mode(), autocast(device, bf16), held:
            lengths = [max(len(w) for w in r["input_ids"]) for r in rows]
            for indices in batching.batches(lengths, [len(r["input_ids"]) for r in rows]):
                batch = batching.collate([rows[i] for i in indices], pad_id, model.word_inputs)
                batch = {k: v.to(device) for k, v in batch.items()}
                for i, result in zip(indices, fn(batch), strict=True):
                    results[i] = result
        yield from results


def inference_batching(
    model: Tagger,
    device: torch.device,
    batch_size: int | None = BATCH_SIZE,
    max_pieces: int | None = None,
    bf16: bool | None = None,
    packed: bool | None = None,
) -> InferenceBatching:
    """How `model` forms inference batches on `device` (the options of `map_batches`): what
    `ner tag` runs, and what `ner predict`'s data module is given so both batch alike."""
    budget = max_pieces or piece_budget(device, bf16_inference(device, bf16))
    pack = packed is not False and can_pack(model)
    if packed and not pack:
        raise ValueError("this model's batches cannot be packed")
    return InferenceBatching(batch_size, budget, pack)


def can_pack(model: Tagger) -> bool:
    """Whether a model's inference batches can be packed (`ner.data.row_packing`): a torch model
    whose forward reads packed rows (`packs_rows`), with no other runtime attached, whose
    encoder numbers positions in a way packing can reproduce."""
    encoder = getattr(model, "encoder", None)
    if not getattr(model, "packs_rows", False) or getattr(model, "runtime", None) is not None:
        return False
    if encoder is None or encoder.config._attn_implementation not in ("sdpa", "eager"):
        return False
    return position_start(encoder) is not None


def iter_tags(
    model: Tagger,
    sentences: Iterable[Sequence[str]],
    consistency: float | None = None,
    **kwargs: Any,
) -> Iterator[Tagged]:
    """(IOB2 tags, per-word scores) for each sentence, in input order (see `map_batches`).

    `consistency`: the weight of document-level consistency (`ner.inference.consistency`; 0:
    off; None: the model's own, as its checkpoint recorded it); it needs `doc_ids`.
    """
    if consistency is None:
        consistency = getattr(model, "consistency", 0.0)
    if not consistency or kwargs.get("doc_ids") is None:
        return map_batches(model, lambda batch: decode_batch(model, batch), sentences, **kwargs)
    return _consistent_tags(model, sentences, consistency, **kwargs)


def _consistent_tags(
    model: Tagger, sentences: Iterable[Sequence[str]], weight: float, doc_ids: Iterable[int], **kw
) -> Iterator[Tagged]:
    """`iter_tags` with each document decoded once all its sentences are scored."""
    sentences, words = itertools.tee(sentences)
    doc_ids, grouping = itertools.tee(doc_ids)
    outputs = map_batches(model, lambda b: sentence_outputs(model, b), sentences, doc_ids, **kw)
    return decode_documents(model, words, outputs, grouping, weight)


def warm_up(model: Tagger, batch_size: int | None = BATCH_SIZE, max_pieces: int | None = None):
    """Tag once in every batch shape packed inference meets (`ner.data.row_packing`), so that
    the first requests do not pay for the kernels' set-up of each new shape (a server calls it
    when it loads). Returns the row counts run (one sentence only, if nothing is packed)."""
    device = next(model.parameters()).device
    batching = inference_batching(model, device, batch_size, max_pieces)
    if not batching.pack:
        list(iter_tags(model, [["warm"]]))
        return [1]
    # a sentence of a row's pieces fills a row alone; one or two short ones: narrower batches
    sentence = ["a"] * (ROW_PIECES - 2)  # two special pieces
    most = max(1, min(batching.max_pieces // ROW_PIECES, batch_size or ROW_PIECES))
    counts = sorted({rounded_rows(n) for n in range(1, most + 1)})
    for count in counts:  # a count over `most` is the shape of `most` rows, rounded up
        sentences = [sentence] * min(count, most)
        list(iter_tags(model, sentences, batch_size=batch_size, max_pieces=max_pieces))
    # narrower: one row (one short sentence, or two that share it), or two rows over half full
    narrow = [[["a"] * (width - 2)] for width in range(PIECES_STEP, ROW_PIECES, PIECES_STEP)]
    for sentences in [*narrow, [["a"] * (ROW_PIECES - PIECES_STEP - 2)] * 2]:
        list(iter_tags(model, sentences, batch_size=batch_size, max_pieces=max_pieces))
    return counts


def predict_entities(
    model: Tagger, texts: Sequence[str | Sequence[str]], **kwargs: Any
) -> list[list[dict[str, Any]]]:
    """Entities per input: raw strings are split CoNLL-style; word lists are taken as given."""
    prepared = [words_and_offsets(t) for t in texts]
    tagged = iter_tags(model, (words for words, _, _ in prepared), **kwargs)
    return [
        entities_from_tags(tags, scores, offsets, text)
        for (_, offsets, text), (tags, scores) in zip(prepared, tagged, strict=True)
    ]
