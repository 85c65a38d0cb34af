"""Word vectors of every hidden state: what `ner embed`, `ner probe` and the `LayerProjection`
callback read. The same windows, alignment and pooling as training (`ner.inference.map_batches`),
so every word, in long sentences and zero-piece words alike, gets exactly one row."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ner.combiners import LastLayer, resolve_layers
from ner.errors import NERError
from ner.inference import map_batches
from ner.pooling import WordPooling
from ner.tagger import NERTagger
from ner.text import words_and_offsets

COMBINE = ("none", "concat", "sum", "mean")


def encoder_tagger(encoder: str, pooling: str = "first") -> NERTagger:
    """A tagger around a plain encoder (hub name, local path, bundled package), only for its
    windows, hidden states and pooling: its head is never used."""
    return NERTagger(
        encoder=encoder,
        labels=["O"],
        combiner=LastLayer(),
        pooling=WordPooling(pooling),
        word_features=None,
    ).eval()


def check_layers(model: NERTagger, layers: Sequence[int] | None) -> list[int]:
    """Hidden-state indices 0..L (negatives from the end); None = all. A one-line error for an
    index the encoder lacks."""
    count = model.encoder.config.num_hidden_layers + 1
    if layers is None:
        return list(range(count))
    return resolve_layers(layers, count - 1, "--layers")


def layer_word_vectors(
    model: NERTagger, batch: dict[str, Tensor], layers: Sequence[int], with_combiner: bool = False
) -> tuple[Tensor, Tensor | None]:
    """One encoder pass: pooled word vectors of the chosen hidden states `[batch, words,
    layers, hidden]` and, `with_combiner`, the model's own combined and pooled vectors
    `[batch, words, dim]` (word features excluded: they are not a hidden state)."""
    hidden = model.encoder(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        output_hidden_states=True,
    ).hidden_states
    sentences, words = batch["word_mask"].shape

    def pool(states: Tensor) -> Tensor:  # [rows, pieces, H] -> [batch, words, H']
        vectors = model.pooling(states, batch["piece_word"], sentences * words)  # [B*W, H']
        return vectors.view(sentences, words, -1)

    stacked = torch.stack([pool(hidden[layer]) for layer in layers], dim=2)  # [B, W, layers, H']
    mixed = pool(model.combiner(hidden, batch["attention_mask"])) if with_combiner else None
    return stacked, mixed


def combine(vectors: np.ndarray, how: str) -> np.ndarray:
    """`[words, layers, hidden]` -> `[words, layers*hidden]` (concat), `[words, hidden]` (sum,
    mean) or unchanged (none)."""
    if how == "none":
        return vectors
    if how == "concat":
        return vectors.reshape(vectors.shape[0], -1)  # [words, layers*hidden]
    if how == "sum":
        return vectors.sum(axis=1)  # [words, hidden]
    if how == "mean":
        return vectors.mean(axis=1)  # [words, hidden]
    raise NERError(f"unknown combination {how!r} (one of {', '.join(COMBINE)})", path="--combine")


def iter_word_states(
    model: NERTagger,
    sentences: Iterable[Sequence[str]],
    doc_ids: Iterable[int] | None = None,
    layers: Sequence[int] | None = None,
    with_combiner: bool = False,
    **kwargs: Any,
) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """Per sentence, in input order: its words' vectors `[words, layers, hidden]` (float32) and,
    `with_combiner`, the model's combined vectors `[words, dim]` (else None). `kwargs` go to
    `ner.inference.map_batches` (batch size, piece budget, window settings, bf16)."""
    chosen = check_layers(model, layers)
    kwargs.setdefault("bf16", False)  # exported vectors: full precision unless asked

    def fn(batch: dict[str, Tensor]) -> list[tuple[np.ndarray, np.ndarray | None]]:
        stacked, combined = layer_word_vectors(model, batch, chosen, with_combiner)
        states = stacked.float().cpu().numpy()
        mixed = None if combined is None else combined.float().cpu().numpy()
        lengths = batch["word_mask"].sum(1).tolist()
        return [
            (states[i, :n], None if mixed is None else mixed[i, :n]) for i, n in enumerate(lengths)
        ]

    return map_batches(model, fn, sentences, doc_ids, **kwargs)


def embed(
    texts: Sequence[str | Sequence[str]],
    encoder: str | None = None,
    model: NERTagger | None = None,
    layers: Sequence[int] | None = None,
    how: str = "none",
    pooling: str = "first",
) -> list[np.ndarray]:
    """Word vectors for a list of texts (raw strings split CoNLL-style, or word lists): one
    array a text, `[words, layers, hidden]` (`how="none"`) or combined (`concat|sum|mean`).
    Give an `encoder` (name or path) or a trained `model` (`ner.tagger.load_tagger`)."""
    if (encoder is None) == (model is None):
        raise NERError("give an encoder or a model, not both", path="embed")
    model = model if model is not None else encoder_tagger(encoder, pooling)
    words = [words_and_offsets(t)[0] for t in texts]
    return [combine(states, how) for states, _ in iter_word_states(model, words, layers=layers)]
