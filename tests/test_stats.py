"""Corpus statistics and `ner inspect` on small corpora written by the tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ner.cli.inspect import main as inspect_main
from ner.corpus.reader import read_conll
from ner.data.stats import NO_DOCUMENTS, corpus_stats, format_stats
from ner.utils.errors import NERError

CORPUS = """-DOCSTART- O

John B-PER
Smith I-PER
visited O
Paris B-LOC
. O

-DOCSTART- O

Acme B-ORG
Corp I-ORG
said O
"""

# Word pieces with the tiny vocabulary: "xyzzy" is x ##y ##z ##z ##y; U+200B has no piece at all.
PIECES = """john B-PER
\u200b O
visited O
paris B-LOC

mary B-PER
visited O
xyzzy O
today O

the O
\u200b O
"""


def write(tmp_path: Path, text: str, name: str = "data.conll") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = inspect_main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_corpus_stats(tmp_path):
    path = write(tmp_path, CORPUS)
    assert corpus_stats(read_conll(path)) == {
        "file": path,
        "scheme": "IOB2",
        "documents": 2,
        "sentences": 2,
        "tokens": 8,
        "entities": {"LOC": 1, "ORG": 1, "PER": 1},
        "longest_sentence_words": 5,
    }


def test_entities_sorted_by_type(tmp_path):
    stats = corpus_stats(read_conll(write(tmp_path, "a B-ZZ\nb B-AA\nc B-MM\nd I-MM\n")))
    assert list(stats["entities"].items()) == [("AA", 1), ("MM", 1), ("ZZ", 1)]


def test_piece_stats(tmp_path, tiny_tokenizer):
    corpus = read_conll(write(tmp_path, PIECES))
    stats = corpus_stats(corpus, tiny_tokenizer, max_length=8)
    # [CLS] + pieces + [SEP]: 2 + 4, 2 + 8 (over 8), 2 + 2; a zero-piece word counts as [UNK]
    assert stats["longest_sentence_words"] == 4
    assert stats["longest_sentence_pieces"] == 10
    assert stats["max_length"] == 8
    assert stats["sentences_over_window"] == 1
    assert stats["zero_piece_words"] == 2
    # the tiny tokenizer has no model_max_length (about 1e30): the window is capped at 512
    default = corpus_stats(corpus, tiny_tokenizer)
    assert default["max_length"] == 512
    assert default["sentences_over_window"] == 0
    assert corpus_stats(corpus, tiny_tokenizer, max_length=10)["sentences_over_window"] == 0
    with pytest.raises(NERError) as exc:
        corpus_stats(corpus, tiny_tokenizer, max_length=2)
    assert str(exc.value) == "max_length: must be more than the 2 special tokens, not 2"


def test_piece_stats_in_batches(tmp_path, tiny_tokenizer, monkeypatch):
    corpus = read_conll(write(tmp_path, PIECES))
    whole = corpus_stats(corpus, tiny_tokenizer, max_length=8)
    monkeypatch.setattr("ner.data.stats.BATCH", 2)
    assert corpus_stats(corpus, tiny_tokenizer, max_length=8) == whole


def test_format_stats(tmp_path, tiny_tokenizer):
    corpus = read_conll(write(tmp_path, PIECES))
    assert format_stats(corpus_stats(corpus)) == "\n".join(
        [
            corpus.path,
            "  scheme            IOB2",
            "  documents         " + NO_DOCUMENTS,
            "  sentences         3",
            "  tokens            10",
            "  entities          3 (LOC 1, PER 2)",
            "  longest sentence  4 words",
        ]
    )
    report = format_stats(corpus_stats(corpus, tiny_tokenizer, max_length=8)).splitlines()
    assert report[-4:] == [
        "  most pieces            10 (special tokens included)",
        "  encoder window         8 pieces",
        "  sentences over window  1",
        "  zero-piece words       2",
    ]
    no_entities = read_conll(write(tmp_path, "a O\n", "o"))
    assert "  entities          0\n" in format_stats(corpus_stats(no_entities)) + "\n"


def test_inspect_report(tmp_path, capsys):
    first, second = write(tmp_path, CORPUS, "a"), write(tmp_path, PIECES, "b")
    code, out, err = run(capsys, [first, second])
    assert (code, err) == (0, "")
    expected = [format_stats(corpus_stats(read_conll(p))) for p in (first, second)]
    assert out == "\n\n".join(expected) + "\n"


def test_inspect_json(tmp_path, capsys):
    first, second = write(tmp_path, CORPUS, "a"), write(tmp_path, PIECES, "b")
    code, out, _ = run(capsys, ["--json", first])
    assert code == 0
    assert json.loads(out) == corpus_stats(read_conll(first))
    code, out, _ = run(capsys, [first, "--json", second])
    assert code == 0
    assert [s["file"] for s in json.loads(out)] == [first, second]
    assert [s["tokens"] for s in json.loads(out)] == [8, 10]


def test_inspect_with_tokenizer(tmp_path, capsys, tiny_model_dir):
    path = write(tmp_path, PIECES)
    code, out, err = run(
        capsys, ["--json", "--tokenizer", str(tiny_model_dir), "--max-length", "8", path]
    )
    assert (code, err) == (0, "")
    stats = json.loads(out)
    assert stats["longest_sentence_pieces"] == 10
    assert stats["sentences_over_window"] == 1
    assert stats["zero_piece_words"] == 2


def test_inspect_options(tmp_path, capsys):
    path = write(tmp_path, "John I-PER NNP\nsaid O VBD\n")
    code, out, _ = run(capsys, ["--json", "--tag-column", "1", "--scheme", "IOB1", path])
    assert code == 0
    assert json.loads(out)["scheme"] == "IOB1"
    assert json.loads(out)["entities"] == {"PER": 1}


@pytest.mark.parametrize(
    ("text", "argv", "message"),
    [
        ("a O\nb O O\n", [], "{path}:2: 3 columns, but the first token line (line 1) has 2"),
        (
            "a B-PER\nb E-PER\n",
            ["--scheme", "IOB2"],
            "{path}:2: tag 'E-PER' is not in the IOB2 scheme",
        ),
        ("\n\n", [], "{path}: no sentences"),
        ("a O\n", ["--max-length", "8"], "--max-length: needs --tokenizer"),
    ],
)
def test_inspect_errors(tmp_path, capsys, text, argv, message):
    path = write(tmp_path, text)
    code, out, err = run(capsys, [*argv, path])
    assert (code, out) == (2, "")
    assert err == f"error: {message.format(path=path)}\n"


def test_inspect_stops_at_the_first_bad_file(tmp_path, capsys):
    good, missing = write(tmp_path, CORPUS), str(tmp_path / "missing.conll")
    code, out, err = run(capsys, [good, missing])
    assert (code, out, err) == (2, "", f"error: {missing}: no such file\n")


def test_inspect_bad_tokenizer(tmp_path, capsys):
    path, missing = write(tmp_path, CORPUS), str(tmp_path / "no-tokenizer")
    code, out, err = run(capsys, ["--tokenizer", missing, path])
    assert (code, out) == (2, "")
    assert err.startswith(f"error: --tokenizer: cannot load {missing!r}: ")
    assert err.count("\n") == 1


def test_no_torch_at_import():
    code = (
        "import sys, ner.data.stats; print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "False"]
