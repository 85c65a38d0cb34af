"""Prediction inputs and outputs, shared by `ner predict` and `ner tag`.

Inputs: a text file (one document a line), a CoNLL file (tags ignored, columns kept) or stdin.
Outputs: JSONL (one object an input: `text`, `entities`) or CoNLL (one line an input token, tags in
the input's scheme, or IOB2 for text input).
"""

from __future__ import annotations

import argparse
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
from ner.inference import entities_from_tags, split_words, words_and_offsets
from ner.reader import Corpus, read_conll

FORMATS = ("jsonl", "conll")


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


def read_inputs(path: str, kind: str = "auto") -> PredictInput:
    """Read a prediction input file (`-` for stdin), detecting text or CoNLL unless `kind` says."""
    if kind not in ("auto", "text", "conll"):
        raise NERError(f"input format must be auto, text or conll, not {kind!r}", path="format")
    if path == "-":
        with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as handle:
            handle.write(sys.stdin.buffer.read())
        try:
            result = read_inputs(handle.name, kind)
        finally:
            os.unlink(handle.name)
        result.path = "<stdin>"
        return result
    if not Path(path).is_file():
        raise NERError("no such file", path=path)
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = Path(path).read_bytes()[: exc.start].count(b"\n") + 1
        raise NERError("not UTF-8 text", path=path, line=line) from None
    lines = text.splitlines()
    if kind == "conll" or (kind == "auto" and looks_like_conll(lines[:400])):
        corpus = read_conll(path, has_tags=False)
        return PredictInput(path, "conll", [s.words for s in corpus.sentences], corpus=corpus)
    texts = [ln for ln in lines if ln.strip()]
    if not texts:
        raise NERError("no text to tag", path=path)
    spans = [split_words(t) for t in texts]
    return PredictInput(
        path,
        "text",
        [[w for w, _, _ in s] for s in spans],
        texts=texts,
        offsets=[[(a, b) for _, a, b in s] for s in spans],
    )


def json_records(
    inp: PredictInput, tagged: Iterable[tuple[list[str], list[float]]]
) -> Iterator[dict[str, Any]]:
    """One record an input: its text and entities (character offsets into that text)."""
    for i, (tags, scores) in enumerate(tagged):
        if inp.kind == "text":
            text, offsets = inp.texts[i], inp.offsets[i]
        else:
            _, offsets, text = words_and_offsets(inp.sentences[i])
        yield {"text": text, "entities": entities_from_tags(tags, scores, offsets, text)}


@contextmanager
def open_output(output: str | None) -> Iterator[IO[str]]:
    """stdout for None or `-`; else a temporary file renamed onto `output` only on success."""
    if output in (None, "-"):
        yield sys.stdout
        return
    with atomic_write(output) as handle:
        yield handle


def write_predictions(
    inp: PredictInput,
    tagged: Iterable[tuple[list[str], list[float]]],
    fmt: str,
    output: str | None,
) -> int:
    """Write predictions for `inp` as `fmt` to `output` (stdout if None); returns inputs written."""
    if fmt not in FORMATS:
        raise NERError(f"must be one of {', '.join(FORMATS)}, not {fmt!r}", path="--format")
    count = 0
    with open_output(output) as out:
        if fmt == "jsonl":
            for record in json_records(inp, tagged):
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        elif inp.kind == "conll":
            from ner.reader import write_conll

            predictions = [tags for tags, _ in tagged]
            count = len(predictions)
            write_conll(out, inp.corpus, predictions, inp.corpus.scheme)
        else:
            for words, (tags, _) in zip(inp.sentences, tagged, strict=True):
                out.writelines(f"{w} {t}\n" for w, t in zip(words, tags, strict=True))
                out.write("\n")
                count += 1
    return count


def tag_main(argv: list[str]) -> int:
    """`ner tag CKPT [FILE|-] [--format jsonl|conll] [--output OUT]`."""
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
    inp = read_inputs(args.input, args.input_format)
    tagged = iter_tags(tagger, inp.sentences, batch_size=args.batch_size)
    progress = tqdm(tagged, total=len(inp.sentences), unit="sent", disable=len(inp.sentences) < 500)
    write_predictions(inp, progress, args.format, args.output)
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
