"""Peak RSS of `ner tag CKPT FILE --output OUT` on small to large text files (flat: streamed).

    ner bench stream [--ckpt PATH] [--sizes SMALL MEDIUM LARGE] [--smoke] [--json PATH]

The files hold eng.testb sentences (in a seeded shuffled order) as raw text, one a line, cycled
to the count. Each size is one `python -m ner.cli.main tag` process of its own; its peak RSS is the
ru_maxrss that `os.wait4` returns for it (what /usr/bin/time reports), so the figures do not mix.
Without --ckpt an untrained tagger on the encoder (seeded) is saved as a checkpoint first.

Every file cycles the same sentences (the small file's: the first SMALL of eng.testb in a seeded
shuffled order), so only the size differs: memory is bounded by one `iter_tags` chunk (4,096
sentences) and the batch of the longest sentences, whatever the file's length. The large size
defaults to 40,000, not 100,000: MiniLM tagged ~160 sentences/s on the 2-core CPU this was
written on, so 100k would take ~11 minutes; 40k made the whole run ~6. For the full size:
`--sizes 1000 10000 100000`.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    build_tagger,
    describe,
    headline,
    load_sentences,
    parse,
    parser,
    report,
)

SIZES = ("small", "medium", "large")


def save_checkpoint(tagger, path: Path) -> None:
    """Write `tagger` as Lightning would (its state_dict plus the tagger's own `ner` section),
    so that `NERTagger.load_from_checkpoint` reads it."""
    import torch

    checkpoint = {"state_dict": tagger.state_dict()}
    tagger.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, path)


def write_texts(path: Path, texts: list[str], count: int) -> None:
    """`count` lines of `texts`, cycled."""
    with path.open("w", encoding="utf-8") as out:
        out.writelines(t + "\n" for t in itertools.islice(itertools.cycle(texts), count))


def run_tag(ckpt: str, text: Path, output: Path) -> dict:
    """Run `ner tag` on `text` in a fresh process; its wall seconds and peak RSS (MiB)."""
    cmd = [sys.executable, "-m", "ner.cli.main", "tag", ckpt, str(text), "--output", str(output)]
    with tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        # wait4, not wait: the rusage of this one child (RUSAGE_CHILDREN would be the max of all)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{err.read()[-3000:]}")
    with output.open(encoding="utf-8") as records:
        written = sum(1 for _ in records)
    return {"seconds": seconds, "records": written, "peak_rss_mib": usage.ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0], __file__)
    p.add_argument("--ckpt", help="a trained checkpoint (default: an untrained tagger)")
    p.add_argument(
        "--sizes", type=int, nargs=3, metavar="N", help="sentences in the small, medium and large"
        " files (default 1000 10000 40000; smoke 50 200 500)"
    )  # fmt: skip
    args = parse(p, argv)
    sizes = args.sizes or ([50, 200, 500] if args.smoke else [1000, 10_000, 40_000])
    # every file cycles the same small-file sentences: only the input size differs
    texts = [" ".join(w) for w, _ in load_sentences("testb", limit=sizes[0], seed=args.seed)]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.ckpt
        if not ckpt:
            ckpt = str(Path(tmp) / "untrained.ckpt")
            save_checkpoint(build_tagger(args.encoder, None, args.seed), Path(ckpt))
        for label, count in zip(SIZES, sizes, strict=True):
            text = Path(tmp) / f"{label}.txt"
            write_texts(text, texts, count)
            results[label] = {"sentences": count, **run_tag(ckpt, text, Path(tmp) / "out.jsonl")}
            if results[label]["records"] != count:
                raise RuntimeError(f"{label}: {results[label]['records']} records, not {count}")
    base = results["small"]["peak_rss_mib"]
    headers = ["input", "sentences", "seconds", "sentences/s", "peak RSS MiB", "vs small RSS"]
    rows = [
        [label, r["sentences"], r["seconds"], r["sentences"] / r["seconds"], r["peak_rss_mib"],
         r["peak_rss_mib"] / base]
        for label, r in results.items()
    ]  # fmt: skip
    small, medium, large = (results[label] for label in SIZES)
    ratio = large["peak_rss_mib"] / small["peak_rss_mib"]
    extra_seconds = large["seconds"] - small["seconds"]
    # start-up noise can exceed a smoke run's tagging time
    marginal = (
        (large["sentences"] - small["sentences"]) / extra_seconds
        if extra_seconds > 0
        else float("nan")
    )
    notes = [
        f"peak-RSS ratio large/small ({large['sentences']:,} / {small['sentences']:,} sentences):"
        f" {ratio:.3f}; large/medium: {large['peak_rss_mib'] / medium['peak_rss_mib']:.3f}",
        f"tagging rate without start-up, (large - small) / (seconds large - small):"
        f" {marginal:,.1f} sentences/s",
        "seconds: wall time of the whole `ner tag` process (imports, checkpoint, tagging, JSONL"
        " out); peak RSS: its ru_maxrss from os.wait4",
        f"input: the first {sizes[0]:,} eng.testb sentences of a seeded shuffle (seed"
        f" {args.seed}) as raw text (words joined by spaces), cycled to each count;"
        f" model: {args.ckpt or f'untrained tagger on {describe(args.encoder)} (seeded)'}",
    ]
    extra = {"ratio": ratio, "marginal_sentences_per_s": marginal, "raw": results}
    top = headline(
        f"`ner tag` peak RSS, {large['sentences']:,} sentences vs"
        f" {small['sentences']:,} (flat: 1x)",
        "MiB",
        ("large input", large["peak_rss_mib"]),
        ("small input", small["peak_rss_mib"]),
    )
    report("stream: `ner tag` memory vs input size", headers, rows, notes, args, extra, top)


if __name__ == "__main__":
    main()
