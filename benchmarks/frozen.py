"""Frozen-encoder (feature-based) training: an epoch read from the feature cache vs re-encoding.

    ner bench frozen [--sentences 4000] [--combiner scalar_mix|last] [--smoke]

Both sides are `ner fit`'s own path (NERTagger(freeze_encoder=True) + NERDataModule + a Lightning
Trainer, no validation), on the same seeded eng.train sentences; only `cache_features` differs.
The one-off encoding pass that fills the cache is timed on its own line.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

from benchmarks.common import (
    conll_labels,
    describe,
    headline,
    load_sentences,
    parse,
    parser,
    report,
)
from benchmarks.train import write_conll

HEADERS = ["side", "epochs", "seconds/epoch", "sentences/s", "vs re-encoding", "first loss",
           "epoch-1 loss"]  # fmt: skip


class EpochTimer(pl.Callback):
    """Wall time and mean training loss of each epoch."""

    def __init__(self):
        self.seconds: list[float] = []
        self.losses: list[float] = []
        self.first: list[float] = []  # each epoch's first-step loss
        self._start, self._sum, self._n = 0.0, 0.0, 0

    def on_train_epoch_start(self, trainer, module):
        self._start, self._sum, self._n = time.perf_counter(), 0.0, 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self._n == 0:
            self.first.append(float(outputs["loss"]))
        self._sum, self._n = self._sum + float(outputs["loss"]), self._n + 1

    def on_train_epoch_end(self, trainer, module):
        self.seconds.append(time.perf_counter() - self._start)
        self.losses.append(self._sum / max(1, self._n))


def combiner(name: str):
    from ner.modules.combiners import LastLayer, ScalarMix

    return {"scalar_mix": ScalarMix, "last": LastLayer}[name]()


def frozen_run(args, train_file: Path, cache_dir: Path, cache_features: bool = True):
    """The data module and frozen-encoder tagger both sides use (one recipe)."""
    from ner.data.datamodule import NERDataModule
    from ner.model.tagger import NERTagger

    data = NERDataModule(
        train_file=str(train_file),
        tokenizer=args.encoder,
        batch_size=32,
        labels=conll_labels(),
        scheme="IOB2",
        seed=args.seed,
        cache_dir=str(cache_dir),
    )
    tagger = NERTagger(
        encoder=args.encoder,
        labels=conll_labels(),
        combiner=combiner(args.combiner),
        freeze_encoder=True,
        cache_features=cache_features,
    )
    return data, tagger


def fit(args, train_file: Path, cache_dir: Path, cache_features: bool, epochs: int):
    """Train a frozen-encoder tagger for `epochs`; (timer, data module)."""
    pl.seed_everything(args.seed, verbose=False)
    data, tagger = frozen_run(args, train_file, cache_dir, cache_features)
    timer = EpochTimer()
    trainer = pl.Trainer(
        max_epochs=epochs,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
        precision="32-true",
    )
    trainer.fit(tagger, datamodule=data)
    return timer, data


def build_cache(args, train_file: Path, cache_dir: Path) -> tuple[float, int, list[int]]:
    """Time the one encoding pass that fills the cache; (seconds, bytes on disk, layers)."""
    from ner.data.feature_cache import FeatureCache

    data, tagger = frozen_run(args, train_file, cache_dir)
    data.use_model(tagger)  # its window settings and word features, as `ner fit` does
    data.setup("fit")
    layers = tagger.combiner.layer_indices(tagger.encoder.config.num_hidden_layers)
    cache = FeatureCache(tagger.encoder, layers, precision="32-true", log=lambda _: None)
    start = time.perf_counter()
    store = cache.store(data.datasets["train"], data.cache_root / "features")
    seconds = time.perf_counter() - start
    return seconds, sum(p.stat().st_size for p in store.directory.iterdir()), layers


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0], __file__)
    p.add_argument("--sentences", type=int, default=4000, help="eng.train sentences (seeded)")
    p.add_argument("--combiner", choices=("scalar_mix", "last"), default="scalar_mix")
    p.add_argument("--epochs", type=int, default=2, help="epochs read from the cache")
    args = parse(p, argv)
    if args.smoke:
        args.sentences, args.epochs = 24, 2
    sentences = load_sentences("train", args.sentences, seed=args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        train_file = write_conll(sentences, workdir / "train.txt")
        recompute, data = fit(args, train_file, workdir / "cache", False, 1)
        windows = data.datasets["train"].with_format("arrow")["num_pieces"]
        pieces = int(sum(windows.to_pylist()))
        build_s, size, layers = build_cache(args, train_file, workdir / "cache")
        cached, _ = fit(args, train_file, workdir / "cache", True, args.epochs)
    n = len(sentences)
    base = recompute.seconds[0]
    best = min(cached.seconds)
    rows = [
        ["re-encoding every epoch", 1, base, n / base, 1.0, recompute.first[0],
         recompute.losses[0]],
        ["filling the cache (once)", "-", build_s, n / build_s, base / build_s, "-", "-"],
        [f"epoch from the cache (best of {len(cached.seconds)})", len(cached.seconds), best,
         n / best, base / best, cached.first[0], cached.losses[0]],
    ]  # fmt: skip
    report(
        f"Frozen-encoder training, {args.combiner} combiner",
        HEADERS,
        rows,
        [
            f"{n:,} seeded eng.train sentences ({pieces:,} real pieces), batch 32, fp32, "
            f"{describe(args.encoder)} frozen; Lightning Trainer, no validation",
            f"cache on disk: {size / 2**20:.0f} MiB (float16, hidden states {layers})",
            "losses of epoch 1 (first step, mean): same seed, initial weights and batch order "
            "on both sides; the features differ only by float16 rounding (first-step losses "
            "agree), and the trajectories drift apart from there",
            f"cached epochs: {', '.join(f'{s:.2f} s' for s in cached.seconds)}",
        ],
        args,
        {"threads": torch.get_num_threads()},
        headline(
            f"frozen encoder, {args.combiner}: an epoch of {n:,} sentences",
            "sentences/s",
            ("from the cache", n / best),
            ("re-encoding", n / base),
        ),
        "" if args.combiner == "scalar_mix" else args.combiner,
    )


if __name__ == "__main__":
    main()
