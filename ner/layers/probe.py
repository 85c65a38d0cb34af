"""Per-layer probing of a frozen encoder (the BERT paper's Table 7, feature-based, for any
encoder): every hidden state and every built-in combination of them gets a probe head trained
on train, its epoch chosen on dev, over several seeds.

The encoder runs once a split (`encode_split`); its pooled word vectors of all L + 1 hidden states
are kept as one float16 array `[words, L + 1, hidden]` and every probe trains on slices of it,
the combiners (`ner.modules.combiners`) applied to padded `[sentences, words, hidden]` word states.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ner.evaluation.metrics import entity_counts, entity_scores
from ner.evaluation.seeds import cell, mean_std
from ner.layers.embed import WordStates, iter_word_states
from ner.modules.combiners import (
    LAST_FOUR,
    ConcatLayers,
    LayerCombiner,
    MeanLayers,
    ScalarMix,
    SingleLayer,
    SumLayers,
)
from ner.modules.heads import IGNORE, TaggingHead
from ner.utils.errors import NERError

COMBINERS = {"sum last 4": SumLayers, "mean last 4": MeanLayers,
             "concat last 4": ConcatLayers, "scalar mix": ScalarMix}  # fmt: skip


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
    `ner.layers.embed.iter_word_states`: batch size, piece budget)."""
    states = iter_word_states(model, words, doc_ids, layers=None, **kwargs)
    bar = tqdm(states, total=len(words), unit="sent", desc="encoding", delay=2.0, leave=False)
    return collect((vectors for vectors, _ in bar), tags, labels)


class Probe(nn.Module):
    """A combiner over the stored word states, then a tagging head; both bound in `__init__`."""

    def __init__(self, combiner: LayerCombiner, head: TaggingHead, states: int, hidden: int,
                 labels: list[str]):  # fmt: skip
        super().__init__()
        self.combiner, self.head = combiner, head
        self.head.bind(combiner.bind(states - 1, hidden), labels)
        self.needed = set(combiner.layer_indices(states - 1))

    def forward(self, states: Tensor, mask: Tensor) -> Tensor:
        """`states [B, W, L + 1, H]` -> emissions `[B, W, C]`."""
        # only the states the combiner reads are widened to float32; it never touches the rest
        hidden = [states[:, :, k].float() if k in self.needed else None
                  for k in range(states.shape[2])]  # fmt: skip
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


@dataclass
class TrainConfig:
    """How every probe trains: epochs (best dev epoch kept), Adam's lr, sentences a batch."""

    epochs: int = 5
    lr: float = 1e-3
    batch_size: int = 32


def train_probe(
    make_combiner: Callable[[], LayerCombiner], make_head: Callable[[], TaggingHead],
    data: ProbeData, seed: int, config: TrainConfig,
) -> dict:  # fmt: skip
    """Train one probe for one seed; the state of its best dev epoch is scored on test. Returns
    `seed`, `epoch` (1-based), `dev` and `test` F1 and, for a scalar mix, its `weights`."""
    torch.manual_seed(seed)  # the head's and mix's initial weights, and dropout
    probe = Probe(make_combiner(), make_head(), *data.shape, data.labels)
    probe.to(data.train.states.device)
    optimizer = torch.optim.Adam(probe.parameters(), lr=config.lr)
    order = torch.Generator().manual_seed(seed)
    best_f1, best_state, best_epoch = -1.0, None, 0
    for epoch in range(1, config.epochs + 1):
        probe.train()
        for index in torch.randperm(data.train.size, generator=order).split(config.batch_size):
            states, mask, labels = data.train.batch(index)
            loss = probe.head.loss(probe(states, mask), labels, mask)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        f1 = score(probe, data.dev, config.batch_size)
        if f1 > best_f1:
            best_f1, best_state, best_epoch = f1, copy.deepcopy(probe.state_dict()), epoch
    probe.load_state_dict(best_state)
    result = {"seed": seed, "epoch": best_epoch, "dev": best_f1}
    if data.test is not None:
        result["test"] = score(probe, data.test, config.batch_size)
    weights = probe.combiner.weights()
    if weights is not None:
        result["weights"] = weights.tolist()
    return result


def probe_rows(states: int) -> list[tuple[str, int | None, Callable[[], LayerCombiner]]]:
    """(name, hidden-state index or None, combiner factory): each state 0..L, then the
    combinations (the last four states, or all of them when there are fewer)."""
    last = list(LAST_FOUR[-min(4, states) :])
    rows = [(str(k), k, lambda k=k: SingleLayer(k)) for k in range(states)]
    for name, cls in COMBINERS.items():
        rows.append((name, None, ScalarMix if cls is ScalarMix else lambda c=cls: c(last)))
    return rows


def sweep(
    data: ProbeData, make_head: Callable[[], TaggingHead], seeds: Sequence[int],
    config: TrainConfig, progress: bool = True,
) -> list[dict]:  # fmt: skip
    """Every row of `probe_rows` over every seed, a tqdm bar over the runs on stderr; one
    summary a row (`summarize`)."""
    rows = probe_rows(data.shape[0])
    bar = tqdm(total=len(rows) * len(seeds), unit="probe", desc="probing", disable=not progress)
    results = []
    for name, layer, make_combiner in rows:
        runs = []
        for seed in seeds:
            bar.set_postfix_str(f"{name}, seed {seed}")
            runs.append(train_probe(make_combiner, make_head, data, seed, config))
            bar.update()
        results.append(summarize(name, layer, runs))
    bar.close()
    return results


def summarize(name: str, layer: int | None, runs: list[dict]) -> dict:
    """A row: its runs, dev (and test) F1 mean and sample std in points, mean mix weights."""
    row = {"name": name, "layer": layer, "runs": runs}
    for split in ("dev", "test"):
        if all(split in r for r in runs):
            row[split] = mean_std([100 * r[split] for r in runs])
    if all("weights" in r for r in runs):
        row["weights"] = np.mean([r["weights"] for r in runs], axis=0).tolist()
    return row


def best_layer(rows: Sequence[dict]) -> int:
    """The hidden state whose probe has the best mean dev F1."""
    return max((r for r in rows if r["layer"] is not None), key=lambda r: r["dev"][0])["layer"]


def csv_rows(rows: Sequence[dict]) -> list[list]:
    """probe.csv: a header, then one line a row (F1 in points; test columns only if scored)."""
    test = all("test" in r for r in rows)
    header = ["row", "layer", "dev_f1_mean", "dev_f1_std"]
    header += ["test_f1_mean", "test_f1_std"] if test else []
    lines = [header + ["seeds", "best_epochs"]]
    for r in rows:
        line = [r["name"], "" if r["layer"] is None else r["layer"], *map(_round, r["dev"])]
        line += [*map(_round, r["test"])] if test else []
        seeds = " ".join(str(run["seed"]) for run in r["runs"])
        lines.append(line + [seeds, " ".join(str(run["epoch"]) for run in r["runs"])])
    return lines


def _round(value: float | None) -> float | str:
    return "" if value is None else round(value, 4)


def markdown(rows: Sequence[dict], title: str) -> str:
    """probe.md: the table (mean ± std over seeds, points) and the mean scalar-mix weights."""
    test = all("test" in r for r in rows)
    seeds = len(rows[0]["runs"])
    lines = [f"# Probing {title}", "", f"Entity F1 (mean ± std over {seeds} seeds).", ""]
    lines += ["| hidden state | dev F1 |" + (" test F1 |" if test else "")]
    lines += ["|---|---:|" + ("---:|" if test else "")]
    for r in rows:
        name = "0 (embeddings)" if r["layer"] == 0 else r["name"]
        lines.append(f"| {name} | {cell(r['dev'])} |" + (f" {cell(r['test'])} |" if test else ""))
    for r in rows:
        if "weights" in r:
            weights = ", ".join(f"{k}: {w:.3f}" for k, w in enumerate(r["weights"]))
            lines += [
                "",
                f"Scalar-mix weights (softmax, mean over seeds) by hidden state: {weights}",
            ]
    lines += ["", f"Best single hidden state on dev: {best_layer(rows)}"]
    return "\n".join(lines) + "\n"
