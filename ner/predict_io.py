"""Prediction inputs and outputs, shared by `ner predict` and `ner tag`.

Inputs: a text file (one document a line), a CoNLL file (tags ignored, columns kept) or stdin.
Outputs: JSONL (one object an input: `text`, `entities`) or CoNLL (one line an input token, tags in
the input's scheme, or IOB2 for text input). `ner tag` streams text input: it reads, tags and
writes one chunk of lines at a time (`inference.iter_tags`), so its memory does not grow with
the input; CoNLL input is read whole (writing the columns back needs the corpus).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pytorch_lightning.callbacks import BasePredictionWriter

from ner.errors import NERError
from ner.files import atomic_write
from ner.inference import entities_from_tags, words_and_offsets
from ner.reader import Corpus, read_conll

FORMATS = ("jsonl", "conll")
HEAD_LINES = 400  # lines `looks_like_conll` sees when the input format is "auto"

# A document: its text, its words and their [start, end) character offsets into the text.
Document = tuple[str, list[str], list[tuple[int, int]]]
Tagged = tuple[list[str], list[float]]  # IOB2 tags and per-word scores, as `iter_tags` yields


@dataclass
class PredictInput:
    """Sentences to tag, with what is needed to write the predictions back."""

    path: str
    kind: str  # "text" | "conll"
    sentences: list[list[str]]
    texts: list[str] = field(default_factory=list)  # text input: the raw lines
    offsets: list[list[tuple[int, int]]] = field(default_factory=list)  # text input
    corpus: Corpus | None = None  # CoNLL input


def looks_like_conll(lines: Sequence[str]) -> bool:
    """CoNLL if it starts with -DOCSTART- or has blank-line-separated blocks of short lines."""
    content = [ln for ln in lines if ln.strip()]
    if not content:
        return False
    if content[0].lstrip("\ufeff").startswith("-DOCSTART-"):
        return True
    has_blank = len(content) < len(lines)
    widths = {len(ln.split()) for ln in content}
    return has_blank and len(widths) == 1 and widths.pop() <= 10


def decode_lines(raw: Iterable[bytes], path: str) -> Iterator[str]:
    """UTF-8 lines (a leading BOM dropped) split as `str.splitlines` splits, lazily; a line that
    is not UTF-8 is a one-line `NERError` naming `path` and the line."""
    for number, data in enumerate(raw, 1):
        try:
            text = data.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            byte = data[exc.start]
            raise NERError(f"not UTF-8 text (byte 0x{byte:02x})", path, number) from None
        # b"\n" ends every raw line, so splitting each one splits the whole text the same way
        yield from text.splitlines()


def text_documents(lines: Iterable[str]) -> Iterator[Document]:
    """One document a non-blank line, split into CoNLL-style words."""
    for line in lines:
        if line.strip():
            words, offsets, _ = words_and_offsets(line)
            yield line, words, offsets


@contextmanager
def open_input(path: str, kind: str = "auto") -> Iterator[tuple[str, str, Iterator[bytes]]]:
    """(name, kind, raw lines) of an input file or stdin (`-`), read lazily; kind "auto" is
    detected from the first lines, which are then chained back."""
    if kind not in ("auto", "text", "conll"):
        raise NERError(f"input format must be auto, text or conll, not {kind!r}", path="format")
    if path == "-":
        yield _detect("<stdin>", kind, iter(sys.stdin.buffer))
        return
    if not Path(path).is_file():
        raise NERError("no such file", path=path)
    with open(path, "rb") as handle:
        yield _detect(path, kind, handle)


def _detect(name: str, kind: str, raw: Iterator[bytes]) -> tuple[str, str, Iterator[bytes]]:
    if kind != "auto":
        return name, kind, raw
    head = list(itertools.islice(raw, HEAD_LINES))
    lines = list(itertools.islice(decode_lines(head, name), HEAD_LINES))
    return name, "conll" if looks_like_conll(lines) else "text", itertools.chain(head, raw)


def read_conll_input(path: str, raw: Iterable[bytes]) -> PredictInput:
    """CoNLL input, read whole: writing the predictions back needs its corpus (columns, scheme)."""
    if path != "-":
        corpus = read_conll(path, has_tags=False)
        return PredictInput(path, "conll", [s.words for s in corpus.sentences], corpus=corpus)
    # read_conll reads files: spool stdin to one
    with tempfile.NamedTemporaryFile("wb", suffix=".conll", delete=False) as handle:
        handle.writelines(raw)
    try:
        result = read_conll_input(handle.name, ())
    finally:
        os.unlink(handle.name)
    result.path = "<stdin>"
    return result


def read_inputs(path: str, kind: str = "auto") -> PredictInput:
    """Read a prediction input file (`-` for stdin) whole, detecting text or CoNLL unless `kind`
    says (`ner predict`; `ner tag` streams text input instead)."""
    with open_input(path, kind) as (name, kind, raw):
        if kind == "conll":
            return read_conll_input(path, raw)
        docs = list(text_documents(decode_lines(raw, name)))
    if not docs:
        raise NERError("no text to tag", path=name)
    return PredictInput(
        name,
        "text",
        [words for _, words, _ in docs],
        texts=[text for text, _, _ in docs],
        offsets=[offsets for _, _, offsets in docs],
    )


def documents(inp: PredictInput) -> Iterator[Document]:
    """The documents of `inp`: text lines as read, CoNLL sentences as their words joined."""
    if inp.kind == "text":
        return zip(inp.texts, inp.sentences, inp.offsets, strict=True)
    joined = map(words_and_offsets, inp.sentences)
    return ((text, words, offsets) for words, offsets, text in joined)


def json_record(doc: Document, tagged: Tagged) -> dict[str, Any]:
    """A document's JSONL record: its text and entities (character offsets into that text)."""
    text, _, offsets = doc
    return {"text": text, "entities": entities_from_tags(*tagged, offsets, text)}


def json_records(inp: PredictInput, tagged: Iterable[Tagged]) -> Iterator[dict[str, Any]]:
    """One record an input: its text and entities (character offsets into that text)."""
    return itertools.starmap(json_record, zip(documents(inp), tagged, strict=True))


@contextmanager
def open_output(output: str | None) -> Iterator[IO[str]]:
    """stdout for None or `-`; else a temporary file renamed onto `output` only on success."""
    if output in (None, "-"):
        yield sys.stdout
        return
    with atomic_write(output) as handle:
        yield handle


def write_documents(out: IO[str], fmt: str, rows: Iterable[tuple[Document, Tagged]]) -> int:
    """Write each document's predictions as it comes: a JSONL record or a `word tag` block."""
    count = 0
    for doc, tagged in rows:
        if fmt == "jsonl":
            out.write(json.dumps(json_record(doc, tagged), ensure_ascii=False) + "\n")
        else:
            out.writelines(f"{w} {t}\n" for w, t in zip(doc[1], tagged[0], strict=True))
            out.write("\n")
        count += 1
    return count


def write_predictions(
    inp: PredictInput,
    tagged: Iterable[Tagged],
    fmt: str,
    output: str | None,
) -> int:
    """Write predictions for `inp` as `fmt` to `output` (stdout if None); returns inputs written."""
    if fmt not in FORMATS:
        raise NERError(f"must be one of {', '.join(FORMATS)}, not {fmt!r}", path="--format")
    with open_output(output) as out:
        if fmt == "jsonl" or inp.kind == "text":
            return write_documents(out, fmt, zip(documents(inp), tagged, strict=True))
        from ner.reader import write_conll

        predictions = [tags for tags, _ in tagged]
        write_conll(out, inp.corpus, predictions, inp.corpus.scheme)
        return len(predictions)


def tag_main(argv: list[str]) -> int:
    """`ner tag CKPT [FILE|-] [--format jsonl|conll] [--output OUT]`; text input is streamed.

    An output file appears whole or not at all; on stdout, records before an error stay."""
    parser = argparse.ArgumentParser(prog="ner tag", description="Tag text with a checkpoint.")
    parser.add_argument("checkpoint")
    parser.add_argument("input", nargs="?", default="-", help="text or CoNLL file; - for stdin")
    parser.add_argument("--format", choices=FORMATS, default="jsonl")
    parser.add_argument("--input-format", choices=("auto", "text", "conll"), default="auto")
    parser.add_argument("--output", default=None, help="output file (default: stdout)")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)

    from tqdm.auto import tqdm

    from ner.inference import iter_tags
    from ner.tagger import NERTagger

    tagger = NERTagger.load_from_checkpoint(args.checkpoint)  # a bad checkpoint fails first

    def progress(tagged: Iterable[Tagged]) -> Iterable[Tagged]:
        # no total when streaming; the delay keeps it off for small inputs
        return tqdm(tagged, unit="sent", delay=2.0)

    with open_input(args.input, args.input_format) as (name, kind, raw):
        if kind == "conll":
            inp = read_conll_input(args.input, raw)
            tagged = iter_tags(tagger, inp.sentences, batch_size=args.batch_size)
            write_predictions(inp, progress(tagged), args.format, args.output)
            return 0
        # two views of one lazy stream: iter_tags runs at most a chunk ahead of the writer
        docs, ahead = itertools.tee(text_documents(decode_lines(raw, name)))
        tagged = iter_tags(tagger, (words for _, words, _ in ahead), batch_size=args.batch_size)
        with open_output(args.output) as out:
            if not write_documents(out, args.format, zip(docs, progress(tagged), strict=True)):
                raise NERError("no text to tag", path=name)  # the output file never appears
    return 0


class PredictionFileWriter(BasePredictionWriter):
    """Lightning callback for `ner predict --output OUT`: gathers every rank's predictions and
    writes them once, in input order, through the same writer as `ner tag`."""

    def __init__(self, datamodule, output: str | None, fmt: str = "jsonl"):
        super().__init__(write_interval="epoch")
        if fmt not in FORMATS:
            raise NERError(f"must be one of {', '.join(FORMATS)}, not {fmt!r}", path="--format")
        self.datamodule, self.output, self.fmt = datamodule, output, fmt

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices) -> None:
        import torch.distributed as dist

        rows = [row for batch in predictions for row in batch]
        if dist.is_available() and dist.is_initialized():
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, rows)
            rows = [row for part in gathered for row in part]
        if not trainer.is_global_zero:
            return
        by_id = {row["sent_id"]: (row["tags"], row["scores"]) for row in rows}
        inp = self.datamodule.predict_input
        tagged = [by_id[i] for i in range(len(inp.sentences))]
        write_predictions(inp, tagged, self.fmt, self.output)
