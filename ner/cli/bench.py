"""`ner bench NAME [options]`: run the benchmark `benchmarks/NAME.py` of this checkout. A
benchmark measures this project and its anchor side by side and writes its record
(`docs/runs/benchmarks/NAME[-VARIANT].json`, read by `ner results render`); the options are the
benchmark's own (`ner bench NAME --help`). `ner bench` (or `--list`) lists the benchmarks with
the first line of each one's docstring.

The benchmarks are not part of the package: they run from a source checkout (the project
installed editable), whose `benchmarks/` folder sits beside `ner/`. `ner bench NAME ARGS` runs
what `python -m benchmarks.NAME ARGS` runs from the checkout's root.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

from ner.cli.main import summary, unknown
from ner.utils.errors import NERError

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HELPERS = ("__init__", "common")  # modules of the folder that are not benchmarks


def folder() -> Path:
    """The checkout's `benchmarks/` package; an error where `ner` is installed without it."""
    if not (BENCHMARKS / "__init__.py").is_file():
        raise NERError("benchmarks run from a source checkout (no benchmarks/ beside ner/)")
    return BENCHMARKS


def names() -> list[str]:
    """The benchmarks of the checkout, sorted."""
    return sorted(p.stem for p in folder().glob("*.py") if p.stem not in HELPERS)


def first_line(name: str) -> str:
    """The first line of `benchmarks/NAME.py`'s docstring, read without importing it (torch)."""
    tree = ast.parse((folder() / f"{name}.py").read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree) or ""
    return doc.splitlines()[0] if doc else ""


def listing() -> str:
    """`ner bench`: every benchmark with its line."""
    found = names()
    width = max(map(len, found), default=0)
    lines = ["usage: ner bench NAME [options]   (ner bench NAME --help: the benchmark's options)",
             "", summary("bench"), "", "benchmarks (benchmarks/NAME.py):"]  # fmt: skip
    lines += [f"  {name:<{width}}  {first_line(name)}" for name in found]
    return "\n".join(lines)


def run(name: str, argv: list[str]) -> None:
    """Import `benchmarks.NAME` from the checkout and run its `main` with `sys.argv` as
    `python -m benchmarks.NAME ARGV` has it (argparse names the program `ner bench NAME`)."""
    found = names()
    if name not in found:
        raise unknown(name, found, "benchmark")
    root = str(folder().parent)
    if root not in sys.path:  # an editable install puts only `ner` on the path
        sys.path.insert(0, root)
    module = importlib.import_module(f"benchmarks.{name}")
    saved = sys.argv
    sys.argv = [f"ner bench {name}", *argv]
    try:
        module.main()
    finally:
        sys.argv = saved


def main(argv: list[str]) -> int:
    """List the benchmarks, or run one."""
    if not argv or argv[0] in ("--list", "-h", "--help"):
        print(listing())
        return 0
    run(argv[0], argv[1:])
    return 0
