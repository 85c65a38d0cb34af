"""`ner predict` reads, tags and writes its input a part at a time (memory flat in the input's
length; `benchmarks/large.py` measures it): parts are read lazily and keep their line numbers,
the parts' output is what one whole run writes, and a failure in a later part leaves no file."""

from __future__ import annotations

import json

import pytest

import ner.cli.lightning
from ner.corpus.inputs import iter_inputs
from ner.utils.errors import NERError
from tests.helpers import TAG_LINES, one_line_error, run_ner


def _lines(parts) -> list[list[int]]:
    return [[p.line for p in part.passages] for part in parts]


def test_text_is_read_in_parts_that_keep_their_line_numbers(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("a b\n\nc\nd e f\ng\n")
    assert _lines(iter_inputs(str(text), part=2)) == [[1, 2], [3, 4], [5]]
    parts = list(iter_inputs(str(text), part=2))
    assert [p.words for part in parts for p in part.passages] == [
        ["a", "b"], [], ["c"], ["d", "e", "f"], ["g"]]  # fmt: skip
    assert all(part.doc_ids == list(range(len(part.passages))) for part in parts)
    assert _lines(iter_inputs(str(text), part=None)) == [[1, 2, 3, 4, 5]]


def test_conll_is_one_part_with_its_corpus(tmp_path):
    conll = tmp_path / "in.conll"
    conll.write_text("-DOCSTART- O\n\nJohn I-PER\n\nParis I-LOC\nis O\n\n")
    (part,) = iter_inputs(str(conll), part=1)
    assert [p.words for p in part.passages] == [["John"], ["Paris", "is"]]
    assert part.corpus is not None and part.kind == "conll"


def test_a_part_comes_before_a_later_line_is_read(tmp_path):
    text = tmp_path / "in.txt"
    text.write_bytes(b"one\ntwo\nthree\nbad \xff byte\n")
    parts = iter_inputs(str(text), "text", part=2)  # (auto reads the first lines to detect)
    assert _lines([next(parts)]) == [[1, 2]]  # yielded though line 4 is not UTF-8
    with pytest.raises(NERError, match=f"^{text}:4: not UTF-8"):
        list(parts)


def test_an_empty_input_is_an_error(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(NERError, match="no text to tag"):
        list(iter_inputs(str(empty), part=2))


def _predict(ckpt, source, capsys, *extra):
    return run_ner(["predict", "--ckpt_path", ckpt, "--data.predict_file", str(source),
                    "--trainer.enable_progress_bar", "false", *extra], capsys)  # fmt: skip


def _spans(records):
    return [(r["line"], r["text"], [(e["start"], e["end"], e["label"]) for e in r["entities"]])
            for r in records]  # fmt: skip


@pytest.fixture
def lines_file(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(TAG_LINES) + "\n")
    return source


def test_parts_write_what_one_part_writes(trained, lines_file, tmp_path, capsys, monkeypatch):
    ckpt = str(trained["ckpt"] / "best.ckpt")
    whole = tmp_path / "whole.jsonl"
    code, _, err = _predict(ckpt, lines_file, capsys, "--output", str(whole))
    assert code == 0, err
    monkeypatch.setattr(ner.cli.lightning, "PREDICT_PART", 2)
    parts = tmp_path / "parts.jsonl"
    code, _, err = _predict(ckpt, lines_file, capsys, "--output", str(parts))
    assert code == 0, err
    code, out, err = _predict(ckpt, lines_file, capsys)  # stdout, part by part
    assert code == 0, err
    expected = [json.loads(line) for line in whole.read_text().splitlines()]
    assert [r["line"] for r in expected] == list(range(1, len(TAG_LINES) + 1))
    for got in (parts.read_text(), out):
        records = [json.loads(line) for line in got.splitlines()]
        assert _spans(records) == _spans(expected)
        # other batches (a part's sentences only): fp32 sums in another order, nothing more
        scores = [e["score"] for r in records for e in r["entities"]]
        assert scores == pytest.approx([e["score"] for r in expected for e in r["entities"]],
                                       abs=1e-5)  # fmt: skip


def test_a_bad_line_in_a_later_part_leaves_no_file(trained, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ner.cli.lightning, "PREDICT_PART", 2)
    source, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_bytes(b"John visited Paris\nMary met Reuters\nok\nthe \xff byte\n")
    code, _, err = _predict(str(trained["ckpt"] / "best.ckpt"), source, capsys, "--output",
                            str(out), "--data.predict_format", "text")  # fmt: skip
    assert one_line_error(code, err).startswith(f"error: {source}:4: not UTF-8 text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_a_limited_run_counts_its_limit_over_the_whole_input(trained, lines_file, capsys,
                                                             monkeypatch):  # fmt: skip
    monkeypatch.setattr(ner.cli.lightning, "PREDICT_PART", 2)
    code, out, err = _predict(
        str(trained["ckpt"] / "best.ckpt"),
        lines_file,
        capsys,
        "--data.batch_size",
        "2",
        "--trainer.limit_predict_batches",
        "1",
    )
    assert code == 0, err
    assert len(out.splitlines()) == 2
    assert err.count("partial run:") == 1
    assert f"partial run: tagged 2 of {len(TAG_LINES)} passages" in err
