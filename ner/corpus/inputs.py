"""What `ner tag`, `ner predict` and `ner embed` read: raw text or CoNLL, from a file or stdin.

The format comes from the caller (`--input-format`), else the file's extension (`.txt` unless
its content is unmistakably CoNLL), else the content: a `-DOCSTART-` line or a tag-like last
column (`O`, `B-X`, ...) means CoNLL. When the content
leaves it open, the choice is reported through `note`. Text is read lazily, one passage per line,
split on `\\n` only (`\\r\\n` accepted): a blank line is a passage with no words, and every passage
keeps its 1-based line number. CoNLL is read whole (writing it back needs the corpus).
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ner.corpus.reader import DOCSTART, Corpus, read_conll
from ner.corpus.text import Offsets, words_and_offsets
from ner.utils.errors import NERError

KINDS = ("auto", "text", "conll")
CONLL_SUFFIXES = (".conll", ".conllu", ".iob", ".bio", ".tsv")
TEXT_SUFFIXES = (".txt",)
HEAD_LINES = 400  # lines the content detection looks at
_TAG = re.compile(r"O|[BIES]-\S+")


@dataclass
class Passage:
    """One unit to tag and write back: its line number, text, words and their offsets."""

    line: int
    text: str
    words: list[str]
    offsets: Offsets


@dataclass
class PredictInput:
    """A whole input read: its passages (one a line, or one a CoNLL sentence) and documents."""

    name: str
    kind: str  # "text" | "conll"
    passages: list[Passage]
    doc_ids: list[int] = field(default_factory=list)  # the document of each passage
    corpus: Corpus | None = None  # CoNLL input


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def detect(lines: list[str]) -> tuple[str, bool]:
    """(kind, sure) from the content of the first lines."""
    content = [ln for ln in lines if ln.strip()]
    if not content:
        return "text", True
    if content[0].lstrip("\ufeff").split()[0] == DOCSTART:
        return "conll", True
    tagged = sum(
        len(cols) >= 2 and _TAG.fullmatch(cols[-1]) is not None for cols in map(str.split, content)
    )
    if tagged == len(content):
        return "conll", True
    if tagged == 0:
        # one token a line with blank lines between blocks: untagged CoNLL, or a word list
        single = len(content) < len(lines) and all(len(ln.split()) == 1 for ln in content)
        return ("conll", False) if single else ("text", True)
    return ("conll" if 2 * tagged > len(content) else "text"), False


def choose_kind(name: str, kind: str, head: list[str], note: Callable[[str], None]) -> str:
    """The format: as asked, else by extension, else by content (reported when unsure). A
    `.txt` file whose content is unmistakably CoNLL (a `-DOCSTART-` line first, or every line
    a word and a tag) is read as CoNLL, and that is reported too."""
    if kind not in KINDS:
        raise NERError(f"must be one of {', '.join(KINDS)}, not {kind!r}", path="--input-format")
    if kind != "auto":
        return kind
    suffix = Path(name).suffix.lower()
    if suffix in CONLL_SUFFIXES:
        return "conll"
    kind, sure = detect(head)
    if suffix in TEXT_SUFFIXES:
        if kind == "conll" and sure:
            note(f"reading {name} as conll (its content is CoNLL); --input-format text to choose")
            return "conll"
        return "text"
    if not sure:
        note(f"reading {name} as {kind} (from its content); --input-format text|conll to choose")
    return kind


def decode_lines(raw: Iterable[bytes], name: str) -> Iterator[str]:
    """UTF-8 lines without their `\\n` / `\\r\\n` (a leading BOM dropped), lazily; a line that is
    not UTF-8 is a one-line `NERError` naming `name` and the line."""
    for number, data in enumerate(raw, 1):
        try:
            text = data.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            byte = data[exc.start]
            raise NERError(f"not UTF-8 text (byte 0x{byte:02x})", name, number) from None
        yield text.removesuffix("\n").removesuffix("\r")


@contextmanager
def open_input(
    path: str, kind: str = "auto", note: Callable[[str], None] = _stderr
) -> Iterator[tuple[str, str, Iterator[bytes]]]:
    """(name, kind, raw lines) of an input file or stdin (`-`), read lazily; with kind "auto"
    the first lines are read for detection and chained back."""
    if path == "-":
        # binary lines end at b"\n" only: U+2028, U+0085, form feeds stay inside their line
        yield _with_kind("<stdin>", kind, iter(sys.stdin.buffer), note)
        return
    if Path(path).is_dir():
        raise NERError("is a directory, not a file", path=path)
    try:
        handle = open(path, "rb")  # noqa: SIM115  (closed below, after the caller's block)
    except FileNotFoundError:
        raise NERError("no such file", path=path) from None
    except PermissionError:
        raise NERError("permission denied", path=path) from None
    with handle:
        yield _with_kind(path, kind, iter(handle), note)


def _with_kind(
    name: str, kind: str, raw: Iterator[bytes], note
) -> tuple[str, str, Iterator[bytes]]:
    head: list[bytes] = []
    if kind == "auto" and Path(name).suffix.lower() not in CONLL_SUFFIXES:
        head = list(itertools.islice(raw, HEAD_LINES))
    lines = list(decode_lines(head, name))
    return name, choose_kind(name, kind, lines, note), itertools.chain(head, raw)


def text_passages(lines: Iterable[str]) -> Iterator[Passage]:
    """One passage a line, split into CoNLL-style words (a blank line has none)."""
    for number, line in enumerate(lines, 1):
        words, offsets, _ = words_and_offsets(line)
        yield Passage(number, line, words, offsets)


def read_conll_input(name: str, raw: Iterable[bytes]) -> PredictInput:
    """CoNLL input, read whole (tags ignored, columns kept): a passage a sentence."""
    if name == "<stdin>":  # read_conll reads files: spool stdin to one
        with tempfile.NamedTemporaryFile("wb", suffix=".conll", delete=False) as handle:
            handle.writelines(raw)
        try:
            result = read_conll_input(handle.name, ())
        finally:
            os.unlink(handle.name)
        result.name = "<stdin>"
        if result.corpus is not None:
            result.corpus.path = "<stdin>"
        return result
    corpus = read_conll(name, has_tags=False)
    passages = []
    for sentence in corpus.sentences:
        words, offsets, text = words_and_offsets(sentence.words)
        passages.append(Passage(sentence.line, text, words, offsets))
    return PredictInput(name, "conll", passages, corpus.doc_ids, corpus)


def iter_inputs(
    path: str, kind: str = "auto", part: int | None = None, note: Callable[[str], None] = _stderr
) -> Iterator[PredictInput]:
    """The input in parts of at most `part` passages (None: one part), read lazily, so memory
    follows the part and not the file: text in line order, each passage keeping its line number
    (each line is a document of its own, so a cut anywhere changes nothing); CoNLL in one part
    (writing it back needs the whole corpus). An input with no passage is a one-line error."""
    with open_input(path, kind, note) as (name, kind, raw):
        if kind == "conll":
            yield read_conll_input(name, raw)
            return
        passages = text_passages(decode_lines(raw, name))
        empty = True
        while chunk := list(itertools.islice(passages, part)):
            empty = False
            yield PredictInput(name, "text", chunk, list(range(len(chunk))))
        if empty:
            raise NERError("no text to tag", path=name)


def read_inputs(
    path: str, kind: str = "auto", note: Callable[[str], None] = _stderr
) -> PredictInput:
    """A whole prediction input (`-` for stdin): text (a passage and a document a line) or CoNLL."""
    with closing(iter_inputs(path, kind, None, note)) as parts:
        return next(parts)
