"""Does a sentence's tagging depend on what it is tagged with? Alone, in batches, shuffled.

Per backend, every sentence of a CoNLL file tagged alone, in batches of 64, and shuffled in
batches of 64.

    ner bench invariance [--ckpt PATH] [--conll FILE] [--backends NAME ...]
        [--limit N] [--smoke] [--out PATH]

Each mode is one `ner.inference.routine.iter_tags` over all the sentences (each its own document,
so only the batch differs): `alone` in batches of 1, `batches of 64` in the file's order, and
`shuffled` in a seeded shuffled order, put back in the file's order to compare. A sentence
counts as differing when its tags differ: constrained IOB2 tags are one-to-one with entities,
so that is a sentence whose entities differ. Target: 0 for every backend and mode. `vs torch
fp32` counts the sentences whose entities differ from torch fp32's alone (int8's agreement).
`seconds` is one pass, wall time, after a warm-up (the ONNX export is made before it).

`torch bf16 autocast` runs only where the CPU has native bf16 (emulated bf16 is far slower,
and no serving path picks it there). Without --ckpt an untrained tagger on the encoder (seeded)
stands in; its random head has many near ties, a harder test than a trained one.
"""

from __future__ import annotations

import os
import random
import time

from benchmarks.common import (
    CONLL_DIR,
    ROOT,
    build_tagger,
    describe,
    headline,
    native_bf16,
    parse,
    parser,
    report,
)

# backend name -> (backend, quantize, bf16 autocast) of `accelerate` and `iter_tags`
BACKENDS = {
    "torch fp32": ("torch", None, False),
    "torch bf16 autocast": ("torch", None, True),
    "onnx fp32": ("onnx", None, False),
    "onnx int8": ("onnx", "int8", False),
    "torchao int8": ("torch", "int8", False),
}
MODES = ("alone", "batches of 64", "shuffled, batches of 64")
HEADERS = ["backend", "mode", "sentences", "seconds", "sentences/s", "differ from alone"]
HEADERS += ["vs torch fp32"]
SMOKE_SENTENCES = 8
WARMUP = 8  # sentences tagged before the clock, in batches of 1 and of 64


def tag_modes(model, sentences: list[list[str]], bf16: bool, seed: int) -> dict[str, tuple]:
    """mode -> (tags of each sentence in the file's order, seconds)."""
    from ner.inference.routine import iter_tags

    def tags(words: list[list[str]], batch_size: int) -> list[list[str]]:
        return [t for t, _ in iter_tags(model, words, bf16=bf16, batch_size=batch_size)]

    order = random.Random(seed).sample(range(len(sentences)), len(sentences))
    for size in (1, 64):  # warm-up: first calls build kernels and caches for their shapes
        tags(sentences[:WARMUP], size)
    out = {}
    for mode in MODES:
        start = time.perf_counter()
        if mode == "alone":
            got = tags(sentences, 1)
        elif mode == "batches of 64":
            got = tags(sentences, 64)
        else:
            shuffled = tags([sentences[i] for i in order], 64)
            got = [[] for _ in sentences]
            for position, i in enumerate(order):
                got[i] = shuffled[position]
        out[mode] = got, time.perf_counter() - start
    return out


def differ(a: list[list[str]], b: list[list[str]]) -> int:
    """How many sentences have other tags (other entities) in `a` than in `b`."""
    return sum(x != y for x, y in zip(a, b, strict=True))


def shown(path: str) -> str:
    """`path` as the notes show it: relative to the repository when it can be."""
    return os.path.relpath(path, ROOT) if os.path.isabs(path) else path


def main(argv: list[str] | None = None) -> None:
    from ner.corpus.reader import read_conll
    from ner.inference.backends import accelerate

    p = parser(__doc__.splitlines()[0], __file__)
    p.add_argument("--ckpt", help="a trained checkpoint (default: an untrained tagger)")
    p.add_argument("--conll", default=str(CONLL_DIR / "eng.testb"), help="the sentences")
    p.add_argument("--backends", nargs="+", choices=list(BACKENDS), default=list(BACKENDS))
    p.add_argument("--limit", type=int, help="the first N sentences only")
    p.add_argument("--out", dest="json", metavar="PATH", help="write the JSON record to PATH")
    args = parse(p, argv)
    limit = SMOKE_SENTENCES if args.smoke else args.limit
    sentences = [s.words for s in read_conll(args.conll).sentences][:limit]
    names = [n for n in args.backends if native_bf16() or not BACKENDS[n][2]]
    rows, record, reference = [], {}, None
    for name in names:
        backend, quantize, bf16 = BACKENDS[name]
        model = build_tagger(args.encoder, args.ckpt, args.seed).eval()
        accelerate(model, backend, quantize)  # an ONNX export is made here, before the clock
        modes = tag_modes(model, sentences, bf16, args.seed)
        alone = modes["alone"][0]
        if name == "torch fp32":
            reference = alone
        record[name] = {}
        for mode, (got, seconds) in modes.items():
            versus = differ(got, reference) if reference is not None else None
            record[name][mode] = {"differ from alone": differ(got, alone), "vs torch fp32": versus}
            rows.append([name, mode, len(got), seconds, len(got) / seconds])
            rows[-1] += [differ(got, alone), "-" if versus is None else versus]
    model_note = args.ckpt or f"{describe(args.encoder)} (untrained)"
    notes = [
        f"{len(sentences):,} sentences of {shown(args.conll)}, {model_note}",
        "differ from alone: sentences whose entities differ from the same backend's alone run "
        "(target 0); vs torch fp32: from torch fp32 alone; seconds: one pass, wall time",
    ]
    if len(names) < len(args.backends):
        notes.append("torch bf16 autocast skipped: this CPU has no native bf16")
    worst = max(rows, key=lambda row: row[5])
    top = headline(
        f"sentences of {len(sentences):,} whose entities move with their batch"
        " (target 0), the worst backend and mode",
        "sentences",
        (f"{worst[0]}, {worst[1]}", worst[5]),
    )
    extra = {"ckpt": args.ckpt, "differ": record}
    report("Tags of a sentence vs its batch mates", HEADERS, rows, notes, args, extra, top)


if __name__ == "__main__":
    main()
