"""`ner predict` on a large generated text file with 1 and 2 processes: lines/s and peak RSS.

Lines/s and the peak RSS of every process, with 1 and with 2 processes side by side, at a small
and at the large line count.

    ner bench large [--ckpt PATH] [--lines N] [--small N] [--processes 1 2]
                    [--encoder-layers K] [--smoke] [--json PATH]

The files hold generated lines (a seeded generator: 4 to 20 words drawn from the eng.testb
vocabulary, or from a built-in list without ../shared, some capitalised), written as they are
generated. Each run is `python -m ner predict --data.predict_file FILE --output OUT` in fresh
processes; 2 processes are two DDP ranks (gloo, 127.0.0.1) started here with Lightning's
variables (`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `NODE_RANK`, `LOCAL_RANK`), each given
half the cores (`OMP_NUM_THREADS`), so that `os.wait4` returns each one's own peak RSS
(ru_maxrss: what /usr/bin/time reports). Both process counts must write a record for every
line in order; the table's notes say how far their entities and scores agree.

Targets: peak RSS flat in the number of lines (large / small within 1.3x, per process); the
rows give lines/s. Without --ckpt an untrained tagger on the encoder (seeded) is saved first;
`--encoder-layers K` keeps its first K layers (a faster model, the same pipeline).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import CONLL_DIR, describe, headline, parse, parser, report
from benchmarks.stream import save_checkpoint

RSS_TARGET = 1.3
FALLBACK_WORDS = (
    "the a of in to and is was on for with by at from said visited met today yesterday "
    "John Smith Mary Paris London Berlin Germany France Acme Corp Reuters bank city new York "
    "president minister company market shares percent year week government officials"
).split()


def vocabulary() -> list[str]:
    """The words lines are drawn from: eng.testb's (sorted, deduplicated), else a fixed list."""
    testb = CONLL_DIR / "eng.testb"
    if not testb.is_file():
        return FALLBACK_WORDS
    words = set()
    for line in testb.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("-DOCSTART-"):
            words.add(line.split()[0])
    return sorted(words)


def write_lines(path: Path, count: int, seed: int, words: list[str]) -> None:
    """`count` generated lines, written as generated (memory does not grow with `count`)."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as out:
        for _ in range(count):
            line = [rng.choice(words) for _ in range(rng.randint(4, 20))]
            if rng.random() < 0.5:
                line[0] = line[0].capitalize()
            out.write(" ".join(line) + "\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_predict(ckpt: str, text: Path, output: Path, processes: int) -> dict:
    """`ner predict` on `text` as `processes` DDP ranks; wall seconds, each rank's peak RSS."""
    cmd = [sys.executable, "-m", "ner", "predict", "--ckpt_path", ckpt, "--data.predict_file",
           str(text), "--data.predict_format", "text", "--output", str(output),
           "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"]  # fmt: skip
    threads = str(max(1, (os.cpu_count() or 1) // processes))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": threads}
    if processes > 1:
        cmd += ["--trainer.strategy", "ddp", "--trainer.devices", str(processes)]
        env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                "WORLD_SIZE": str(processes), "NODE_RANK": "0"}  # fmt: skip
    start = time.perf_counter()
    procs = []
    for rank in range(processes):
        err = tempfile.TemporaryFile("w+")
        rank_env = env | ({"LOCAL_RANK": str(rank)} if processes > 1 else {})
        procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                                       env=rank_env), err))  # fmt: skip
    peaks, seconds = [], []
    for proc, err in procs:
        # wait4, not wait: the rusage of this one child (RUSAGE_CHILDREN would be the max of all)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds.append(time.perf_counter() - start)
        proc.returncode = os.waitstatus_to_exitcode(status)
        peaks.append(usage.ru_maxrss / 1024)
        if proc.returncode:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{err.read()[-3000:]}")
        err.close()
    with output.open("rb") as records:
        written = sum(1 for _ in records)
    return {"seconds": max(seconds), "records": written, "peak_rss_mib": peaks}


def checkpoint(args, folder: Path) -> str:
    """The tagger to run: --ckpt, or an untrained one on the encoder (seeded), saved."""
    if args.ckpt:
        return args.ckpt
    import torch

    from benchmarks.common import conll_labels
    from ner.model.tagger import NERTagger

    torch.manual_seed(args.seed)
    tagger = NERTagger(encoder=args.encoder, labels=conll_labels(),
                       encoder_layers=args.encoder_layers)  # fmt: skip
    path = folder / "untrained.ckpt"
    save_checkpoint(tagger, path)
    return str(path)


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0], __file__)
    p.add_argument("--ckpt", help="a trained checkpoint (default: an untrained tagger)")
    p.add_argument("--lines", type=int, help="lines of the large file (default 1,000,000)")
    p.add_argument("--small", type=int, help="lines of the small file (default 1,000)")
    p.add_argument("--encoder-layers", type=int, help="keep the encoder's first K layers")
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2], choices=[1, 2],
                   help="process counts to run (default: 1 2)")  # fmt: skip
    args = parse(p, argv)
    sizes = [
        args.small or (20 if args.smoke else 1000),
        args.lines or (60 if args.smoke else 10**6),
    ]
    words = vocabulary()
    results, agreement = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = checkpoint(args, Path(tmp))
        for count in sizes:
            text = Path(tmp) / f"lines-{count}.txt"
            write_lines(text, count, args.seed, words)
            for processes in args.processes:
                out = Path(tmp) / f"out-{count}-{processes}.jsonl"
                results[(processes, count)] = run_predict(ckpt, text, out, processes)
                if results[(processes, count)]["records"] != count:
                    raise RuntimeError(f"{out}: {results[(processes, count)]['records']} records")
            outs = [Path(tmp) / f"out-{count}-{n}.jsonl" for n in args.processes]
            if len(outs) == 2:
                agreement[count] = compare_outputs(*outs)
            for path in (text, *outs):  # the large files take disk: one size at a time
                path.unlink()
    headers = ["processes", "lines", "seconds", "lines/s", "peak RSS MiB rank 0",
               "peak RSS MiB rank 1", "RSS vs small"]  # fmt: skip
    rows = []
    for (processes, count), r in sorted(results.items(), key=lambda item: item[0][::-1]):
        base = max(results[(processes, sizes[0])]["peak_rss_mib"])
        second = r["peak_rss_mib"][1] if processes > 1 else "-"
        rows.append([processes, count, r["seconds"], count / r["seconds"],
                     r["peak_rss_mib"][0], second, max(r["peak_rss_mib"]) / base])  # fmt: skip
    ratios = {
        n: max(results[(n, sizes[1])]["peak_rss_mib"]) / max(results[(n, sizes[0])]["peak_rss_mib"])
        for n in args.processes
    }
    verdict = {k: "met" if v <= RSS_TARGET else "MISSED" for k, v in ratios.items()}
    notes = [
        f"peak RSS large/small ({sizes[1]:,} / {sizes[0]:,} lines), the larger rank: "
        + "; ".join(
            f"{k} process{'es' if k > 1 else ''} {v:.2f}x ({verdict[k]}, target <= {RSS_TARGET}x)"
            for k, v in ratios.items()
        ),  # fmt: skip
        "seconds: wall time from start to the last process's exit (imports, checkpoint, "
        "reading, tagging, writing); each process OMP_NUM_THREADS = cores / processes",
        "1 vs 2 processes: the same line and text in every record; "
        + "; ".join(
            f"{count:,} lines: {d['lines_differ']:,} with other entities, scores within "
            f"{d['max_score_diff']:.1e}"
            for count, d in agreement.items()
        )
        + " (each process sums in fp32, or bf16 where autocast runs, on its own thread count, so"
        " scores differ in the last digits and a near-tie can flip)"
        if agreement
        else f"{args.processes[0]} process(es) only",
        f"input: generated lines, 4-20 words from {len(words):,} words (seed {args.seed}); "
        f"model: {args.ckpt or f'untrained tagger on {describe(args.encoder)} (seeded)'}"
        + (f", first {args.encoder_layers} layers" if args.encoder_layers else ""),
    ]
    raw = {f"{k[0]}x{k[1]}": v for k, v in results.items()}
    extra = {"ratios": ratios, "agreement": agreement, "raw": raw}
    one = args.processes[0]
    rss = [max(results[(one, count)]["peak_rss_mib"]) for count in sizes]
    top = headline(
        f"`ner predict` peak RSS, {sizes[1]:,} lines vs {sizes[0]:,} (flat: 1x)",
        "MiB",
        (f"{one} process(es), {sizes[1]:,} lines", rss[1]),
        (f"{sizes[0]:,} lines", rss[0]),
    )
    title = "large: `ner predict` with 1 and 2 processes"
    report(title, headers, rows, notes, args, extra, top)


def compare_outputs(a: Path, b: Path) -> dict:
    """How two `ner predict` JSONL files of the same input agree, read as streams: the lines
    whose entities (text, label, offsets) differ, and the largest score difference between
    entities that agree. A record of another line or text is a RuntimeError: that is a bug, not
    arithmetic."""
    differ, worst = 0, 0.0
    with a.open(encoding="utf-8") as left, b.open(encoding="utf-8") as right:
        for number, (x, y) in enumerate(itertools.zip_longest(left, right), 1):
            if x is None or y is None:
                raise RuntimeError(f"{a} and {b}: another number of records (line {number})")
            x, y = json.loads(x), json.loads(y)
            if (x["line"], x["text"]) != (y["line"], y["text"]):
                raise RuntimeError(f"{a} and {b}: record {number} is of another line")
            spans = [[(e["text"], e["label"], e["start"], e["end"]) for e in r["entities"]]
                     for r in (x, y)]  # fmt: skip
            if spans[0] != spans[1]:
                differ += 1
                continue
            scores = zip(x["entities"], y["entities"], strict=True)
            worst = max([worst, *(abs(e["score"] - f["score"]) for e, f in scores)])
    return {"lines_differ": differ, "max_score_diff": worst}


if __name__ == "__main__":
    main()
