"""`ner bench`: lists the checkout's benchmarks, refuses an unknown one in one line, and hands
the options to the benchmark's own argparse. Nothing is measured here (`--help` only)."""

from __future__ import annotations

import re

from helpers import ROOT, one_line_error, run_ner

from ner.cli import bench

BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py"))
NAMES = [n for n in BENCHMARKS if n not in ("__init__", "common")]


def test_ner_bench_lists_every_benchmark_with_its_first_line(capsys):
    code, out, _ = run_ner(["bench"], capsys)
    assert code == 0
    listed = dict(re.findall(r"^  (\w+)\s+(.+)$", out, flags=re.M))
    assert sorted(listed) == NAMES and "train" in listed and "common" not in listed
    assert listed["predict"] == ("Tagging eng.testb as raw text: `NERTagger.predict` vs the HF"
                                 " token-classification pipeline.")  # fmt: skip
    assert run_ner(["bench", "--list"], capsys)[:2] == (0, out)


def test_an_unknown_benchmark_is_one_line_with_the_nearest_name(capsys):
    code, _, err = run_ner(["bench", "NOPE"], capsys)
    assert (
        one_line_error(code, err) == f"error: unknown benchmark 'NOPE'; one of {', '.join(NAMES)}"
    )
    line = one_line_error(*run_ner(["bench", "predic"], capsys)[::2])
    assert line.startswith("error: unknown benchmark 'predic' (did you mean predict?)")


def test_the_options_go_to_the_benchmarks_own_argparse(capsys):
    code, out, _ = run_ner(["bench", "encoder", "--help"], capsys)
    assert code == 0
    assert out.startswith("usage: ner bench encoder [-h]")
    assert "--peak-size" in out and "--record, --no-record" in out  # its own and the common ones


def test_without_a_source_checkout_it_says_where_benchmarks_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "BENCHMARKS", tmp_path / "benchmarks")
    line = one_line_error(*run_ner(["bench", "train"], capsys)[::2])
    assert line == "error: benchmarks run from a source checkout (no benchmarks/ beside ner/)"
