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
from ner.data.batching import batches_by_length, collate, piece_budget
from ner.data.windows import WindowSettings
from ner.inference.consistency import decode_documents, sentence_outputs
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
    batch_size: int = 64,
    max_pieces: int | None = None,
    chunk_size: int = CHUNK_SIZE,
    bf16: bool | None = None,
) -> Iterator[T]:
    """`fn(batch)` (one result a batch row) over every sentence, yielded in input order.

    `doc_ids`: the document of each sentence (consecutive equal ids: sentences of one document,
    each other's context); None: every sentence its own document. `settings`: None: the model's.
    `max_pieces`: padded pieces a batch (None: `ner.data.batching.piece_budget`). `bf16`:
    autocast in bf16 (None: where the device runs it fast, see `ner.utils.precision`).
    """
    settings = settings or model.window_settings
    device = next(model.parameters()).device
    bf16 = bf16_inference(device, bf16)
    budget = max_pieces or piece_budget(device, bf16)
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
        lengths = [max(len(w) for w in ids) for ids in aligned["input_ids"]]
        windows = [len(ids) for ids in aligned["input_ids"]]
        results: list[Any] = [None] * len(rows)
        held = linears_in_bf16(model) if own else contextlib.nullcontext()
        with torch.inference_mode(), autocast(device, bf16), held:
            for indices in batches_by_length(lengths, batch_size, budget, windows):
                batch = collate([rows[i] for i in indices], pad_id, model.word_inputs)
                batch = {k: v.to(device) for k, v in batch.items()}
                for i, result in zip(indices, fn(batch), strict=True):
                    results[i] = result
        yield from results


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
