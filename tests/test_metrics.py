"""EntityF1 equals seqeval on random (partly invalid) tag sequences, and is exact under DDP."""

from __future__ import annotations

import json
import os
import random
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
from seqeval.scheme import IOB2

from ner.evaluation.metrics import EntityF1, entity_counts, entity_scores, format_report
from ner.utils.errors import NERError

LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-PER", "I-PER"]
TYPES = ["LOC", "MISC", "PER"]


def random_corpus(seed: int, n: int) -> tuple[list[list[str]], list[list[str]]]:
    """Gold and predicted tags: random, so invalid sequences (I-X after O, mixed types) occur."""
    rng = random.Random(seed)
    gold, pred = [], []
    for _ in range(n):
        length = rng.randint(0, 12)
        g = [rng.choice(LABELS) if rng.random() < 0.5 else "O" for _ in range(length)]
        # Predictions: mostly the gold tag, sometimes another tag, so there are hits and misses.
        p = [t if rng.random() < 0.8 else rng.choice(LABELS) for t in g]
        gold.append(g)
        pred.append(p)
    return gold, pred


def to_batch(gold, pred, ids, width=None):
    """Label-id tensors as a batch: padded with -100 (target) / random ids (pred)."""
    width = width or max([len(g) for g in gold] + [1])
    target = torch.full((len(gold), width), -100)
    predicted = torch.randint(0, len(LABELS), (len(gold), width))  # padding must not count
    for i, (g, p) in enumerate(zip(gold, pred, strict=True)):
        target[i, : len(g)] = torch.tensor([LABELS.index(t) for t in g], dtype=torch.long)
        predicted[i, : len(p)] = torch.tensor([LABELS.index(t) for t in p], dtype=torch.long)
    return predicted, target, target != -100, torch.tensor(ids)


def seqeval_scores(gold, pred, strict: bool) -> dict:
    kwargs = {"mode": "strict", "scheme": IOB2} if strict else {}
    report = classification_report(gold, pred, output_dict=True, zero_division=0, **kwargs)
    out = {
        "precision": precision_score(gold, pred, **kwargs),
        "recall": recall_score(gold, pred, **kwargs),
        "f1": f1_score(gold, pred, **kwargs),
        "macro_f1": report["macro avg"]["f1-score"],
    }
    for kind in TYPES:
        row = report[kind]
        out |= {
            f"precision_{kind}": row["precision"],
            f"recall_{kind}": row["recall"],
            f"f1_{kind}": row["f1-score"],
            f"support_{kind}": row["support"],
        }
    return out


def metric_scores(gold, pred, mode: str, batch_size: int = 37) -> dict:
    metric = EntityF1(LABELS, mode=mode)
    for start in range(0, len(gold), batch_size):
        sl = slice(start, start + batch_size)
        metric.update(*to_batch(gold[sl], pred[sl], list(range(len(gold)))[sl]))
    return metric.compute()


@pytest.mark.parametrize("mode", ["default", "strict"])
def test_metric_equals_seqeval_on_random_sequences(mode):
    torch.manual_seed(0)
    gold, pred = random_corpus(seed=0, n=1200)
    want = seqeval_scores(gold, pred, strict=mode == "strict")
    got = metric_scores(gold, pred, mode)
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key] == value, key  # same arithmetic as seqeval: exactly equal
    assert 0.3 < got["f1"] < 0.95  # a non-trivial score: hits and misses
    helper = entity_scores(entity_counts(pred, gold, mode))
    assert helper == got


def test_default_and_strict_differ_as_documented():
    gold, pred = [["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]]
    assert metric_scores(gold, pred, "default")["f1"] == 1.0 == f1_score(gold, pred)
    assert metric_scores(gold, pred, "strict")["f1"] == 0.0
    assert f1_score(gold, pred, mode="strict", scheme=IOB2) == 0.0


def test_zero_division_and_empty_metric_give_zeros():
    with pytest.warns(UserWarning, match="before the ``update``"):
        empty = EntityF1(LABELS).compute()
    assert empty["f1"] == empty["precision"] == empty["macro_f1"] == 0.0
    assert empty["support_PER"] == 0
    got = metric_scores([["O", "O"]], [["B-PER", "O"]], "default")
    assert got["precision"] == got["recall"] == got["f1"] == got["f1_PER"] == 0.0
    assert got["support_PER"] == 0 and got["f1_LOC"] == 0.0
    assert got["macro_f1"] == 0.0  # over PER only, the one type seen (like seqeval)


def test_repeated_sentences_count_once():
    gold, pred = random_corpus(seed=1, n=20)
    metric = EntityF1(LABELS)
    metric.update(*to_batch(gold, pred, list(range(20))))
    metric.update(*to_batch(gold[:3], pred[:3], [0, 1, 2]))  # a sampler's padding repeats
    assert metric.compute() == metric_scores(gold, pred, "default")


def test_bad_mode_is_an_error_and_report_formats():
    with pytest.raises(NERError, match="metric mode"):
        EntityF1(LABELS, mode="lenient")
    gold, pred = random_corpus(seed=2, n=50)
    text = format_report(metric_scores(gold, pred, "default"), LABELS)
    assert text.splitlines()[2].split()[0] == "LOC" and "micro avg" in text


# ---- DDP ------------------------------------------------------------------------------------
DDP_SIZE = 101  # odd: DistributedSampler repeats sentence 0 on rank 1


def ddp_corpus():
    gold, pred = random_corpus(seed=3, n=DDP_SIZE)
    # The repeated sentence has a hit, a miss and a false alarm, so counting it twice shows.
    gold[0] = ["B-PER", "I-PER", "O", "B-LOC", "O"]
    pred[0] = ["B-PER", "I-PER", "O", "O", "B-MISC"]
    return gold, pred


def ddp_worker(rank: int, world_size: int, port: int, out_dir: str) -> None:
    from torch.utils.data import DistributedSampler

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        gold, pred = ddp_corpus()
        sampler = DistributedSampler(
            range(DDP_SIZE), world_size, rank, shuffle=False, drop_last=False
        )
        indices = list(sampler)
        synced, local = EntityF1(LABELS), EntityF1(LABELS, sync_on_compute=False)
        for start in range(0, len(indices), 16):
            ids = indices[start : start + 16]
            batch = to_batch([gold[i] for i in ids], [pred[i] for i in ids], ids)
            synced.update(*batch)
            local.update(*batch)
        result = {"indices": indices, "global": synced.compute(), "local": local.compute()}
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ddp_global_f1_counts_each_sentence_once(tmp_path):
    # fork, not spawn: the children inherit the imports (spawn re-imports torch, seqeval, ...:
    # 10+ s each on a busy 2-core machine). CPU only; torch resets its thread pool in a child.
    args = (2, free_port(), str(tmp_path))
    mp.start_processes(ddp_worker, args=args, nprocs=2, join=True, start_method="fork")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[1]["indices"][-1] == 0 and len(ranks[0]["indices"]) == len(ranks[1]["indices"])
    gold, pred = ddp_corpus()
    single = metric_scores(gold, pred, "default")
    assert ranks[0]["global"] == ranks[1]["global"] == single
    assert single["f1"] == f1_score(gold, pred)
    # What a per-rank F1 averaged by `sync_dist=True` would log, and the count without dedup.
    naive = (ranks[0]["local"]["f1"] + ranks[1]["local"]["f1"]) / 2
    assert naive != single["f1"]
    twice = (
        [gold[i] for r in ranks for i in r["indices"]],
        [pred[i] for r in ranks for i in r["indices"]],
    )
    assert f1_score(*twice) != single["f1"]
