"""What `ner tag`, `ner predict` and `ner test` write: predictions and evaluation reports.

Predictions: JSONL (one record a passage: `line`, `text`, `entities` with character offsets into
that text, and `words` where the raw-text splitter would cut the text into other words, as it
does some CoNLL words: read back, a record has the words it was tagged as) or CoNLL (the input's
columns plus the predicted tag in its scheme; `word tag` lines for text input, one block a line:
a blank line ends each block, so a line with no words is a lone blank line and block n is line
n). `ner tag` also writes the span files annotation tools import (`span_writers`: spacy,
doccano, label-studio). A file appears whole or not at all.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from ner.corpus.inputs import Passage
from ner.corpus.reader import Corpus, write_conll
from ner.corpus.schemes import from_iob2
from ner.corpus.span_tokens import resplit_differs
from ner.corpus.span_writers import TOOL_FORMATS, write_tool_records
from ner.corpus.text import entities_from_tags
from ner.utils.errors import NERError
from ner.utils.files import atomic_write

FORMATS = ("jsonl", "conll")  # `ner predict` writes these (appended a part at a time)
TAG_FORMATS = (*FORMATS, *TOOL_FORMATS)  # `ner tag` writes these too
Tagged = tuple[list[str], list[float]]  # IOB2 tags and per-word scores of one passage


def check_format(fmt: str, formats: tuple[str, ...] = FORMATS) -> str:
    """`fmt` if it is one of `formats`, else a one-line error naming `--format`."""
    if fmt not in formats:
        raise NERError(f"must be one of {', '.join(formats)}, not {fmt!r}", path="--format")
    return fmt


@contextmanager
def open_output(output: str | None) -> Iterator[IO[str]]:
    """stdout for None or `-`; else a temporary file renamed onto `output` only on success."""
    if output in (None, "-"):
        yield sys.stdout
        return
    with atomic_write(output) as handle:
        yield handle


def json_record(passage: Passage, tagged: Tagged) -> dict[str, Any]:
    """A passage's JSONL record: its line, text and entities, and its words where the text does
    not split into them."""
    entities = entities_from_tags(*tagged, passage.offsets, passage.text)
    record = {"line": passage.line, "text": passage.text, "entities": entities}
    if resplit_differs(passage.words, passage.offsets, passage.text):
        record["words"] = passage.words
    return record


def write_passages(
    out: IO[str], fmt: str, rows: Iterable[tuple[Passage, Tagged]], model_version: str = "ner"
) -> int:
    """Write each passage's predictions as it comes; returns the passages written."""
    if fmt in TOOL_FORMATS:
        return write_tool_records(out, fmt, rows, model_version)
    count = 0
    for passage, tagged in rows:
        if fmt == "jsonl":
            out.write(json.dumps(json_record(passage, tagged), ensure_ascii=False) + "\n")
        else:  # a blank line ends every block, an empty one too: block n is line n
            out.writelines(f"{w} {t}\n" for w, t in zip(passage.words, tagged[0], strict=True))
            out.write("\n")
        count += 1
    return count


def write_predictions(
    passages: Iterable[Passage],
    tagged: Iterable[Tagged],
    fmt: str,
    output: str | None,
    corpus: Corpus | None = None,
    name: str = "input",
    model_version: str = "ner",
) -> int:
    """Predictions for `passages` as `fmt` to `output` (stdout if None): CoNLL input (`corpus`)
    in CoNLL keeps its columns and scheme; `model_version` names the model in Label Studio's
    predictions. No passage: a one-line error, and no file."""
    check_format(fmt, TAG_FORMATS)
    with open_output(output) as out:
        written = write_predictions_to(out, passages, tagged, fmt, corpus, model_version)
        if not written:
            raise NERError("no text to tag", path=name)
    return written


def write_predictions_to(
    out: IO[str],
    passages: Iterable[Passage],
    tagged: Iterable[Tagged],
    fmt: str,
    corpus: Corpus | None = None,
    model_version: str = "ner",
) -> int:
    """`write_predictions` into an open stream (one part of a longer output); the passages
    written."""
    if fmt == "conll" and corpus is not None:
        predictions = [tags for tags, _ in tagged]
        write_conll(out, corpus, predictions, corpus.scheme)
        return len(predictions)
    return write_passages(out, fmt, zip(passages, tagged, strict=True), model_version)


def write_test_outputs(
    out_dir: Path,
    stem: str,
    payload: dict[str, Any],
    sentences: Sequence[tuple[Sequence[str], Sequence[str]]],
    predictions: Sequence[Sequence[str]],
    scheme: str,
) -> Path:
    """`<stem>.test-report.json` and a conlleval `word gold pred` file (`<stem>.test-predictions
    .txt`, tags in `scheme`) from (words, gold IOB2) and predicted IOB2 tags; the report path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if len(predictions) != len(sentences):
        raise ValueError(f"{len(predictions)} predictions for {len(sentences)} sentences")
    report = out_dir / f"{stem}.test-report.json"
    with atomic_write(out_dir / f"{stem}.test-predictions.txt") as out:
        for (words, gold), pred in zip(sentences, predictions, strict=True):
            rows = zip(words, from_iob2(gold, scheme), from_iob2(pred, scheme), strict=True)
            out.writelines(f"{w} {g} {p}\n" for w, g, p in rows)
            out.write("\n")
    with atomic_write(report) as out:
        out.write(json.dumps(payload, indent=2) + "\n")
    return report
