"""Per-layer probing of a frozen encoder (the BERT paper's Table 7, feature-based, for any
encoder): the data and the model of a probe. The encoder runs once a split (`encode_split`); its
pooled word vectors of all L + 1 hidden states are kept as one float16 array `[words, L + 1,
hidden]`, and every probe trains on slices of it: each state standardised with train's mean and
spread (so the probe's optimum does not depend on the state's scale), then a combiner
(`ner.modules.combiners`) and a tagging head. Training: `ner.layer_analysis.probe_sweep`; tables:
`ner.layer_analysis.probe_tables`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ner.evaluation.metrics import entity_counts, entity_scores
from ner.layer_analysis.embed import WordStates, iter_word_states
from ner.modules.combiners import LayerCombiner
from ner.modules.heads import IGNORE, TaggingHead
from ner.utils.errors import NERError

CHUNK = 16384  # words a step when the train statistics are summed


@dataclass
class Split:
    """One split's word states `[words, L + 1, hidden]` (float16), sentence starts `offsets
    [sentences + 1]` and gold label ids `[words]`, all on one device."""

    states: Tensor
    offsets: Tensor
    labels: Tensor

    @property
    def size(self) -> int:
        """The number of sentences."""
        return len(self.offsets) - 1

    def to(self, device: str | torch.device) -> Split:
        """This split on `device`."""
        return Split(self.states.to(device), self.offsets.to(device), self.labels.to(device))

    def batch(self, index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Sentences `index` padded: states `[B, W, L + 1, H]`, word mask and labels `[B, W]`."""
        index = index.to(self.offsets.device)
        starts = self.offsets[index]
        lengths = self.offsets[index + 1] - starts
        positions = torch.arange(int(lengths.max()), device=starts.device)
        mask = positions[None] < lengths[:, None]  # [B, W]
        flat = (starts[:, None] + positions[None]).masked_fill(~mask, 0)  # [B, W] word rows
        return self.states[flat], mask, self.labels[flat].masked_fill(~mask, IGNORE)


def collect(
    states: Iterable[np.ndarray], tags: Sequence[Sequence[str]], labels: list[str]
) -> Split:
    """A `Split` from per-sentence word states `[words, L + 1, hidden]` and IOB2 tags, stored
    as float16 in one preallocated array (the states of a large split never sit in a list)."""
    lengths = [len(t) for t in tags]
    if sum(lengths) == 0:
        raise NERError("no words to probe on")
    index = {label: i for i, label in enumerate(labels)}
    unknown = sorted({t for s in tags for t in s} - set(index))
    if unknown:
        raise NERError(f"tags {unknown} are not in the training label set [{', '.join(labels)}]")
    array: np.ndarray | None = None
    row = 0
    for vectors, length in zip(states, lengths, strict=True):
        if array is None:
            array = np.empty((sum(lengths), *vectors.shape[1:]), dtype=np.float16)
        if len(vectors) != length:
            raise ValueError(f"{len(vectors)} word states for a sentence of {length} words")
        array[row : row + length] = vectors
        row += length
    offsets = np.concatenate([[0], np.cumsum(lengths)])  # [sentences + 1]
    ids = torch.tensor([index[t] for s in tags for t in s], dtype=torch.long)
    return Split(torch.from_numpy(array), torch.from_numpy(offsets).long(), ids)


def encode_split(
    model: WordStates, words: Sequence[Sequence[str]], doc_ids: Sequence[int] | None,
    tags: Sequence[Sequence[str]], labels: list[str], **kwargs,
) -> Split:  # fmt: skip
    """The encoder's one pass over a split: all hidden states of every word (`kwargs` go to
    `ner.layer_analysis.embed.iter_word_states`: batch size, piece budget)."""
    states = iter_word_states(model, words, doc_ids, layers=None, **kwargs)
    bar = tqdm(states, total=len(words), unit="sent", desc="encoding", delay=2.0, leave=False)
    return collect((vectors for vectors, _ in bar), tags, labels)


def standardisation(split: Split) -> tuple[Tensor, Tensor]:
    """Mean and standard deviation `[L + 1, H]` of each state's features over `split`'s words
    (float64 sums, in chunks: the states of a large split stay float16)."""
    total = torch.zeros(split.states.shape[1:], dtype=torch.float64)
    squares = torch.zeros_like(total)
    for chunk in split.states.split(CHUNK):
        wide = chunk.double()  # [chunk, L + 1, H]
        total += wide.sum(0)
        squares += wide.square().sum(0)
    count = len(split.states)
    mean = total / count
    variance = (squares / count - mean.square()).clamp(min=0)
    return mean.float(), variance.sqrt().float().clamp(min=1e-6)


class Probe(nn.Module):
    """Standardised word states, a combiner over them, then a tagging head (all bound in
    `__init__`). `scale`: each state's train mean and spread `[L + 1, H]`."""

    def __init__(self, combiner: LayerCombiner, head: TaggingHead, scale: tuple[Tensor, Tensor],
                 labels: list[str]):  # fmt: skip
        super().__init__()
        states, hidden = scale[0].shape
        self.combiner, self.head = combiner, head
        self.head.bind(combiner.bind(states - 1, hidden), labels)
        self.needed = set(combiner.layer_indices(states - 1))
        self.register_buffer("mean", scale[0], persistent=False)
        self.register_buffer("std", scale[1], persistent=False)

    def forward(self, states: Tensor, mask: Tensor) -> Tensor:
        """`states [B, W, L + 1, H]` -> emissions `[B, W, C]`."""
        # only the states the combiner reads are widened to float32; it never touches the rest
        hidden = [(states[:, :, k].float() - self.mean[k]) / self.std[k] if k in self.needed
                  else None for k in range(states.shape[2])]  # fmt: skip
        return self.head(self.combiner(hidden, mask), mask)


def score(probe: Probe, split: Split, batch_size: int) -> float:
    """Entity-level F1 (seqeval's, as everywhere in `ner`) of the probe's decoded tags."""
    labels = probe.head.labels
    pred: list[list[str]] = []
    gold: list[list[str]] = []
    probe.eval()
    with torch.no_grad():
        for index in torch.arange(split.size).split(batch_size):
            states, mask, target = split.batch(index)
            tags, _ = probe.head.decode(probe(states, mask), mask)
            for p, g, n in zip(tags.tolist(), target.tolist(), mask.sum(1).tolist(), strict=True):
                pred.append([labels[x] for x in p[:n]])
                gold.append([labels[x] for x in g[:n]])
    return entity_scores(entity_counts(pred, gold))["f1"]


@dataclass
class ProbeData:
    """The stored splits (test optional) and the IOB2 label set of train."""

    labels: list[str]
    train: Split
    dev: Split
    test: Split | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """(hidden states L + 1, hidden size)."""
        return self.train.states.shape[1], self.train.states.shape[2]

    def scale(self) -> tuple[Tensor, Tensor]:
        """Each state's train mean and spread `[L + 1, H]`, on the splits' device (once)."""
        if not hasattr(self, "_scale"):
            device = self.train.states.device
            self._scale = tuple(t.to(device) for t in standardisation(self.train))
        return self._scale
