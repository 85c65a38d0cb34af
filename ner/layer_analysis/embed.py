"""Word vectors of every hidden state: what `ner embed`, `ner probe` and the `LayerProjection`
callback read. The same windows, alignment and pooling as training
(`ner.inference.routine.map_batches`), so every word, in long sentences and zero-piece words
alike, gets exactly one row."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ner.corpus.text import words_and_offsets
from ner.data.pretrained import load_tokenizer
from ner.data.windows import WindowSettings, default_windows
from ner.inference.routine import map_batches
from ner.model.tagger import NERTagger
from ner.modules.combiners import LayerCombiner, resolve_layers
from ner.modules.encoder import depth, hidden_states, keep_layers, load_encoder, packed_inputs
from ner.modules.pooling import Mode, WordPooling
from ner.utils.errors import NERError

COMBINE = ("none", "concat", "sum", "mean")


class WordStates(nn.Module):
    """An encoder with its tokenizer, windows and word pooling (and a trained tagger's
    combiner, if it comes from one): the word vectors of its hidden states. It is the
    `ner.inference.routine.Tagger` that `map_batches` needs to align and batch sentences."""

    word_inputs: tuple[str, ...] = ()  # word features are not hidden states
    packs_rows = True  # its forward reads packed rows' positions and segments

    def __init__(
        self,
        encoder: nn.Module,
        tokenizer: Any,
        window_settings: WindowSettings,
        pooling: WordPooling,
        combiner: LayerCombiner | None = None,
        name: str = "",
    ):
        super().__init__()
        self.encoder, self.pooling, self.combiner = encoder, pooling, combiner
        self.tokenizer, self.window_settings, self.name = tokenizer, window_settings, name

    @classmethod
    def of_encoder(cls, name: str, pooling: Mode = "first") -> WordStates:
        """A plain encoder (hub name, local path, the bundled package) and its default windows."""
        tokenizer, encoder = load_tokenizer(name), load_encoder(name).eval()
        return cls(encoder, tokenizer, default_windows(tokenizer, encoder.config),
                   WordPooling(pooling), name=name)  # fmt: skip

    @classmethod
    def of_tagger(cls, tagger: NERTagger, pooling: Mode | None = None) -> WordStates:
        """A trained tagger's encoder, windows, pooling (or `pooling`) and combiner, shared."""
        pool = tagger.pooling if pooling in (None, tagger.pooling.mode) else WordPooling(pooling)
        return cls(tagger.encoder, tagger.tokenizer, tagger.window_settings, pool,
                   tagger.combiner, tagger.encoder_name)  # fmt: skip

    def computing_up_to(self, deepest: int) -> WordStates:
        """A plain encoder that computes no layer above `deepest` (before its first pass): the
        word vectors of the states up to it cost no more than those layers. A tagger's encoder
        already computes only what its combiner reads."""
        if self.combiner is None:
            keep_layers(self.encoder, deepest)
        return self

    @property
    def num_states(self) -> int:
        """Hidden states the encoder computes: the embeddings and each layer it keeps."""
        return depth(self.encoder) + 1

    def forward(
        self, batch: dict[str, Tensor], layers: Sequence[int], with_combiner: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """One encoder pass: word vectors of the hidden states `layers` `[batch, words, layers,
        hidden]` and, `with_combiner`, the tagger's combined ones `[batch, words, dim]` (word
        features excluded), pooled as the tagger pools."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        hidden = hidden_states(self.encoder, ids, mask, **packed_inputs(batch))
        stacked = torch.stack([self.pooling.words(hidden[k], batch) for k in layers], dim=2)
        if not with_combiner or self.combiner is None:
            return stacked, None
        return stacked, self.pooling.words(self.combiner(hidden, batch["attention_mask"]), batch)


def check_layers(model: WordStates, layers: Sequence[int] | None) -> list[int]:
    """Hidden-state indices 0..L (negatives from the end); None = all. A one-line error for an
    index the encoder lacks."""
    if layers is None:
        return list(range(model.num_states))
    return resolve_layers(layers, model.num_states - 1, "--layers")


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
    model: WordStates,
    sentences: Iterable[Sequence[str]],
    doc_ids: Iterable[int] | None = None,
    layers: Sequence[int] | None = None,
    with_combiner: bool = False,
    **kwargs: Any,
) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """Per sentence, in input order: its words' vectors `[words, layers, hidden]` (float32) and,
    `with_combiner`, the model's combined vectors `[words, dim]` (else None). `kwargs` go to
    `ner.inference.routine.map_batches` (batch size, piece budget, window settings, bf16)."""
    chosen = check_layers(model, layers)
    kwargs.setdefault("bf16", False)  # exported vectors: full precision unless asked

    def fn(batch: dict[str, Tensor]) -> list[tuple[np.ndarray, np.ndarray | None]]:
        stacked, combined = model(batch, chosen, with_combiner)
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
    pooling: Mode | None = None,
) -> list[np.ndarray]:
    """Word vectors for a list of texts (raw strings split CoNLL-style, or word lists): one
    array a text, `[words, layers, hidden]` (`how="none"`) or combined (`concat|sum|mean`).
    Give an `encoder` (name or path) or a trained `model` (`ner.model.tagger.load_tagger`);
    `pooling` None: the model's, else `first`."""
    if (encoder is None) == (model is None):
        raise NERError("give an encoder or a model, not both", path="embed")
    if model is not None:
        states = WordStates.of_tagger(model, pooling)
    else:
        states = WordStates.of_encoder(encoder, pooling or "first")
    chosen = check_layers(states, layers)
    states.computing_up_to(max(chosen))
    words = [words_and_offsets(t)[0] for t in texts]
    return [combine(vectors, how) for vectors, _ in iter_word_states(states, words, layers=chosen)]
