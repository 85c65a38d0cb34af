"""Fine-tuning throughput (real word pieces/s): our recipe (bf16, fp32) vs the HF Trainer recipe.

ner bench train [--steps 20 --warmup 2] [--smoke] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import (
    build_tagger,
    conll_labels,
    describe,
    headline,
    load_sentences,
    native_bf16,
    parse,
    parser,
    report,
)
from benchmarks.hf_recipe import encode, recipe_args, recipe_model


def write_conll(sentences: list[tuple[list[str], list[str]]], path: Path) -> Path:
    """Sentences as a two-column IOB2 CoNLL file (one document)."""
    lines = []
    for words, tags in sentences:
        lines += [f"{w} {t}" for w, t in zip(words, tags, strict=True)] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def run_ours(
    sentences, args, bf16: bool, workdir: Path, warmup: int, steps: int, compile: bool = False
) -> dict:
    """NERTagger + NERDataModule (length-bucketed), a plain loop over `training_step` + AdamW;
    `warmup` untimed steps, then `steps` timed ones. `compile`: the encoder through
    `torch.compile` (inductor, dynamic shapes: every length bucket is another shape)."""
    from ner.data.datamodule import NERDataModule

    tagger = build_tagger(args.encoder, seed=args.seed)
    data = NERDataModule(
        train_file=str(write_conll(sentences, workdir / "train.txt")),
        tokenizer=args.encoder,
        batch_size=args.batch_size,
        labels=conll_labels(),
        scheme="IOB2",
        seed=args.seed,
        cache_dir=str(workdir / "cache"),
    )
    data.use_model(tagger)  # its window settings and word features, as `ner fit` does
    data.setup("fit")
    tagger.train()
    if compile:
        tagger.encoder.compile(dynamic=True)
    optimizer = tagger.optimizer()  # the same (fused) AdamW as `ner fit`
    # what Lightning's bf16-mixed does: autocast around forward + loss, backward outside
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    real = padded = timed = 0
    start, began = None, time.perf_counter()
    for i, batch in enumerate(data.train_dataloader()):
        if i == warmup + steps:
            break
        if i >= warmup:
            real += int(batch["attention_mask"].sum())
            padded += batch["attention_mask"].numel()
            timed += 1
        with autocast:
            loss = tagger.training_step(batch, i)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(tagger.parameters(), 1.0)  # as configs/: clip 1.0
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i == warmup - 1:
            start = time.perf_counter()  # the next batch's loading is inside the timed span
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "steps": timed, "real": real, "padded": padded,
            "warmup_seconds": start - began}  # fmt: skip


def run_hf(sentences, args, workdir: Path, bf16: bool = False) -> dict:
    """AutoModelForTokenClassification + Trainer + DataCollatorForTokenClassification, in fp32 or
    with the Trainer's own bf16 mixed precision (`bf16=True`: autocast on the CPU)."""
    from transformers import (
        AutoTokenizer,
        DataCollatorForTokenClassification,
        PrinterCallback,
        Trainer,
        TrainerCallback,
    )

    labels = conll_labels()
    index = {label: i for i, label in enumerate(labels)}
    tokenizer = AutoTokenizer.from_pretrained(args.encoder)
    dataset = encode(tokenizer, sentences, index)
    steps_per_ours = args.batch_size // args.hf_batch_size
    warmup = args.warmup * steps_per_ours
    pieces: list[tuple[int, int]] = []
    stamps: list[float] = []

    class Timed(Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            mask = inputs["attention_mask"]
            pieces.append((int(mask.sum()), mask.numel()))
            return super().training_step(model, inputs, num_items_in_batch)

    class Stamp(TrainerCallback):
        def on_step_end(self, *_, **__):
            stamps.append(time.perf_counter())

    model = recipe_model(args.encoder, labels, args.seed)
    training_args = recipe_args(
        str(workdir / "hf"),
        args.seed,
        max_steps=len(sentences) // args.hf_batch_size,
        per_device_train_batch_size=args.hf_batch_size,
        bf16=bf16,
    )
    trainer = Timed(
        model=model,
        args=training_args,
        train_dataset=dataset,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        callbacks=[Stamp()],
    )
    trainer.remove_callback(PrinterCallback)  # it prints the final metrics dict
    trainer.train()
    timed = pieces[warmup:]
    return {
        "seconds": stamps[-1] - stamps[warmup - 1],
        "steps": len(timed),
        "real": sum(r for r, _ in timed),
        "padded": sum(p for _, p in timed),
    }


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0], __file__)
    # 60 + 5 steps took 18 min on the shared 2-core AVX2 host (ours fp32 ~130 pieces/s, HF ~65)
    p.add_argument("--steps", type=int, default=20, help="timed optimizer steps of ours")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps of ours before them")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per batch, ours")
    p.add_argument("--hf-batch-size", type=int, default=16, help="sentences per batch, HF")
    p.add_argument(
        "--bf16-steps", type=int, help="timed steps of ours in bf16 (default: --steps; 2 after"
        " 1 warm-up step on a CPU without native bf16, where it is far slower than fp32)"
    )  # fmt: skip
    p.add_argument("--compile", action="store_true", help="also ours, bf16 + torch.compile")
    p.add_argument(
        "--hf-bf16", action=argparse.BooleanOptionalAction, default=None,
        help="also the HF Trainer with bf16=True (default: where the CPU runs bf16 natively)",
    )  # fmt: skip
    args = parse(p, argv)
    if args.hf_bf16 is None:
        args.hf_bf16 = native_bf16() or args.smoke  # smoke: the code path, on any CPU
    if args.smoke:
        args.steps, args.warmup, args.batch_size, args.hf_batch_size = 1, 1, 2, 1
    bf16_warmup, bf16_steps = args.warmup, args.steps
    if args.bf16_steps is not None:
        bf16_steps = args.bf16_steps
    elif not native_bf16():
        bf16_warmup, bf16_steps = 1, min(2, args.steps)
    if args.warmup < 1 or args.batch_size % args.hf_batch_size:
        p.error("--warmup must be >= 1 and --batch-size a multiple of --hf-batch-size")
    # Both recipes get the same sentences, each once: the first (warmup + steps) x batch of a
    # seeded shuffle; HF takes batch_size / hf_batch_size times as many (smaller) steps.
    sentences = load_sentences("train", (args.warmup + args.steps) * args.batch_size, args.seed)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        bf16 = run_ours(sentences, args, True, Path(tmp), bf16_warmup, bf16_steps)
        results["ours, bf16 autocast"] = bf16
        results["ours, fp32"] = run_ours(sentences, args, False, Path(tmp), args.warmup, args.steps)
        if args.compile:
            results["ours, bf16 + torch.compile"] = run_ours(
                sentences, args, True, Path(tmp), bf16_warmup, bf16_steps, compile=True
            )
        results["HF Trainer, fp32"] = run_hf(sentences, args, Path(tmp))
        if args.hf_bf16:
            results["HF Trainer, bf16"] = run_hf(sentences, args, Path(tmp), bf16=True)
    anchors = [k for k in results if k.startswith("HF")]
    rates = {k: r["real"] / r["seconds"] for k, r in results.items()}
    headers = ["recipe", "steps", "real pieces", "real/padded", "seconds", "pieces/s"]
    headers += [f"vs {k}" for k in anchors]
    rows = []
    for name, r in results.items():
        row = [name, r["steps"], r["real"], r["real"] / r["padded"], r["seconds"], rates[name]]
        rows.append(row + [rates[name] / rates[k] for k in anchors])
    notes = [
        f"encoder: {describe(args.encoder)}",
        f"{len(sentences)} eng.train sentences (seeded shuffle, seed {args.seed}), each seen once;"
        f" timed after {args.warmup} warm-up steps of ours"
        f" ({args.warmup * args.batch_size // args.hf_batch_size} of HF)",
        f"ours: batch {args.batch_size} sentences, length-bucketed, plain loop"
        " (training_step, backward, clip 1.0, torch AdamW); HF: batch"
        f" {args.hf_batch_size}, random order, Trainer defaults (fused AdamW, linear schedule)",
        "pieces = sum of attention_mask (specials included) over the timed steps;"
        " wall time includes batch loading",
        "vs HF fp32 of 'ours, fp32' is the pipeline's gain alone; of 'ours, bf16' with bf16 on"
        " top; vs HF bf16 (the Trainer's bf16=True, CPU autocast) compares like with like",
        "warm-up seconds (compilation included): "
        + ", ".join(f"{k} {r['warmup_seconds']:.1f}" for k, r in results.items() if "ours" in k),
    ]
    if (bf16_warmup, bf16_steps) != (args.warmup, args.steps):
        notes.append(
            f"ours, bf16: only {bf16_steps} timed steps after {bf16_warmup} warm-up"
            " (the first batches of the same order)"
        )
    fastest = max((row for row in rows if row[0].startswith("ours")), key=lambda row: row[5])
    anchor = "HF Trainer, fp32"
    top = headline(
        "fine-tuning throughput", "real pieces/s", (fastest[0], fastest[5]), (anchor, rates[anchor])
    )
    variant = "compile" if args.compile else ""  # another side, which the headline may pick
    report("train: fine-tuning throughput", headers, rows, notes, args, top=top, variant=variant)


if __name__ == "__main__":
    main()
