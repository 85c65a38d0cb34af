"""Training the probes of `ner.layer_analysis.probe`: one probe a hidden state or combination and
seed, each trained until dev F1 stops improving (`patience` epochs without a better one, at most
`epochs`), the state of its best dev epoch kept; a sweep over every state and combination."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from ner.evaluation.spread import mean_std
from ner.layer_analysis.probe import Probe, ProbeData, score
from ner.modules.combiners import (
    LAST_FOUR,
    ConcatLayers,
    LayerCombiner,
    MeanLayers,
    ScalarMix,
    SingleLayer,
    SumLayers,
)
from ner.modules.heads import TaggingHead

COMBINERS = {"sum last 4": SumLayers, "mean last 4": MeanLayers,
             "concat last 4": ConcatLayers, "scalar mix": ScalarMix}  # fmt: skip


@dataclass
class TrainConfig:
    """How every probe trains: until `patience` epochs bring no better dev F1, at most
    `epochs` (the best dev epoch is kept); Adam's lr; sentences a batch."""

    epochs: int = 50
    patience: int = 3
    lr: float = 1e-3
    batch_size: int = 32


def train_probe(
    make_combiner: Callable[[], LayerCombiner], make_head: Callable[[], TaggingHead],
    data: ProbeData, seed: int, config: TrainConfig,
) -> dict:  # fmt: skip
    """Train one probe for one seed; the state of its best dev epoch is scored on test. Returns
    `seed`, `epoch` (the best, 1-based), `epochs` (run), `dev` and `test` F1 and, for a combiner
    with weights, its `weights`."""
    torch.manual_seed(seed)  # the head's and mix's initial weights, and dropout
    probe = Probe(make_combiner(), make_head(), data.scale(), data.labels)
    probe.to(data.train.states.device)
    optimizer = torch.optim.Adam(probe.parameters(), lr=config.lr)
    order = torch.Generator().manual_seed(seed)
    best_f1, best_state, best_epoch, epoch = -1.0, None, 0, 0
    while epoch < config.epochs and epoch - best_epoch < config.patience:
        epoch += 1
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
    result = {"seed": seed, "epoch": best_epoch, "epochs": epoch, "dev": best_f1}
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
        results.append(summarize(name, layer, runs, make_combiner().deepest(data.shape[0] - 1)))
    bar.close()
    return results


def summarize(name: str, layer: int | None, runs: list[dict], cost: int | None = None) -> dict:
    """A row: its runs, dev (and test) F1 mean and sample std in points, mean mix weights, and
    `cost`: the encoder layers its features need computed (state k: k)."""
    row = {"name": name, "layer": layer, "cost": layer if cost is None else cost, "runs": runs}
    for split in ("dev", "test"):
        if all(split in r for r in runs):
            row[split] = mean_std([100 * r[split] for r in runs])
    if all("weights" in r for r in runs):
        row["weights"] = np.mean([r["weights"] for r in runs], axis=0).tolist()
    return row
