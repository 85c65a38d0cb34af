"""`benchmarks/large.py --smoke`: `ner predict` with 1 and 2 processes on small generated files
prints its table, every process's peak RSS, and checks itself that both process counts wrote
a record a line, in order, and how far their entities and scores agree. No timing threshold
(figures on a shared 2-core machine say nothing about correctness); a tiny random BERT stands in
for MiniLM."""

from __future__ import annotations

import json

import pytest

from benchmarks import large
from benchmarks.common import parse_table

pytestmark = pytest.mark.integration

HEADERS = ["processes", "lines", "seconds", "lines/s", "peak RSS MiB rank 0",
           "peak RSS MiB rank 1", "RSS vs small"]  # fmt: skip


def test_generated_lines_are_seeded_and_streamed(tmp_path):
    words = ["alpha", "beta", "gamma"]
    large.write_lines(tmp_path / "a.txt", 50, 7, words)
    large.write_lines(tmp_path / "b.txt", 50, 7, words)
    text = (tmp_path / "a.txt").read_text()
    assert text == (tmp_path / "b.txt").read_text()
    lines = text.splitlines()
    assert len(lines) == 50 and all(4 <= len(line.split()) <= 20 for line in lines)
    assert {w.lower() for line in lines for w in line.split()} <= set(words)


def test_large_smoke(tmp_path, capsys, tiny_model_dir):
    out = tmp_path / "figures.json"
    large.main(["--smoke", "--json", str(out), "--encoder", str(tiny_model_dir)])
    headers, rows = parse_table(capsys.readouterr().out)
    assert headers == HEADERS
    assert [(r[0], r[1]) for r in rows] == [("1", "20"), ("2", "20"), ("1", "60"), ("2", "60")]
    # the second rank's own peak; MiB past 999 print with thousands commas
    assert rows[0][5] == "-" and float(rows[1][5].replace(",", "")) > 0
    data = json.loads(out.read_text())
    raw = data["raw"]
    assert [raw[k]["records"] for k in ("1x20", "2x20", "1x60", "2x60")] == [20, 20, 60, 60]
    assert [len(raw[k]["peak_rss_mib"]) for k in ("1x20", "2x20")] == [1, 2]
    for key, result in raw.items():
        lines = int(key.split("x")[1])
        row = next(r for r in data["rows"] if f"{r['processes']}x{r['lines']}" == key)
        assert row["lines/s"] == pytest.approx(lines / result["seconds"])
    assert data["rows"][0]["RSS vs small"] == pytest.approx(1.0)
    assert set(data["ratios"]) == {"1", "2"}  # JSON keys
    assert set(data["agreement"]) == {"20", "60"}
    for agreement in data["agreement"].values():
        assert agreement["lines_differ"] == 0  # a tiny model, far from its near-ties
        assert agreement["max_score_diff"] < 1e-4


def _record(line, text, spans):
    return json.dumps({"line": line, "text": text, "entities": [
        {"text": t, "label": label, "start": s, "end": e, "score": score}
        for t, label, s, e, score in spans]})  # fmt: skip


def test_outputs_compare_by_entities_and_scores(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    rows = [(1, "Ann met Bob", [("Ann", "PER", 0, 3, 0.9), ("Bob", "PER", 8, 11, 0.8)]),
            (2, "in Paris", [("Paris", "LOC", 3, 8, 0.7)])]  # fmt: skip
    a.write_text("".join(_record(*r) + "\n" for r in rows))
    b.write_text(a.read_text())
    assert large.compare_outputs(a, b) == {"lines_differ": 0, "max_score_diff": 0.0}
    other = [rows[0][:2] + ([("Ann", "PER", 0, 3, 0.9), ("Bob", "PER", 8, 11, 0.79998)],),
             (2, "in Paris", [("Paris", "ORG", 3, 8, 0.7)])]  # fmt: skip
    b.write_text("".join(_record(*r) + "\n" for r in other))
    result = large.compare_outputs(a, b)
    assert result["lines_differ"] == 1  # line 2: another label
    assert result["max_score_diff"] == pytest.approx(2e-5)  # line 1 only
    b.write_text(_record(1, "Ann met Bob", []) + "\n")
    with pytest.raises(RuntimeError, match="another number of records"):
        large.compare_outputs(a, b)
    b.write_text(_record(1, "Ann met Bob", []) + "\n" + _record(3, "in Paris", []) + "\n")
    with pytest.raises(RuntimeError, match="record 2 is of another line"):
        large.compare_outputs(a, b)
