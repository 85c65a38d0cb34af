"""CoNLL column files -> `Corpus` (documents -> sentences, tags in IOB2) and writing back.

Runs of spaces or tabs separate columns; a blank line ends a sentence; a `-DOCSTART-` line starts
a document (without any, the file is one `Document`, and each sentence its own for context:
`Corpus.doc_ids`). No torch here.
"""

from __future__ import annotations

import gc
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ner.corpus import schemes
from ner.utils.errors import NERError
from ner.utils.files import atomic_write

DOCSTART = "-DOCSTART-"


@dataclass
class Sentence:
    """One sentence: its words, IOB2 tags and original token-line columns."""

    words: list[str]
    tags: list[str]  # IOB2; all "O" if the file has no tags
    columns: list[list[str]]  # the original columns of each token line, tag column included
    line: int  # 1-based line number of the first token


@dataclass
class Document:
    """The sentences between two -DOCSTART- lines."""

    sentences: list[Sentence]
    docstart: list[str] | None = None  # the columns of its -DOCSTART- line, if it had one


@dataclass
class Corpus:
    """One CoNLL file read: its scheme and documents."""

    path: str
    scheme: str  # the file's scheme: "IOB1" | "IOB2" | "BIOES"
    documents: list[Document]
    format: str = "conll"  # or the span format read (`span_corpus`): a record's words, one line

    @property
    def sentences(self) -> list[Sentence]:
        """All sentences, in file order."""
        return [s for doc in self.documents for s in doc.sentences]

    @property
    def has_docstart(self) -> bool:
        """Whether any -DOCSTART- line marks documents in the file."""
        return any(doc.docstart is not None for doc in self.documents)

    @property
    def doc_ids(self) -> list[int]:
        """The document of each sentence, for document context and packing.

        A file without any -DOCSTART- line says nothing of documents (tweets, shuffled
        sentences), so each sentence is its own: reading unrelated neighbours as context costs
        F1 on such corpora (docs/results.md, "Small corpora").
        """
        if not self.has_docstart:
            return list(range(sum(len(doc.sentences) for doc in self.documents)))
        return [d for d, doc in enumerate(self.documents) for _ in doc.sentences]

    @property
    def num_tokens(self) -> int:
        """The number of token lines."""
        return sum(len(s.words) for doc in self.documents for s in doc.sentences)

    def entities(self) -> Counter:
        """Entities by type (IOB2 `B-` tags)."""
        return Counter(
            schemes.entity_type(t) for s in self.sentences for t in s.tags if t[0] == "B"
        )


def _read_text(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise NERError("no such file", path=path) from None
    except IsADirectoryError:
        raise NERError("is a directory, not a file", path=path) from None
    except PermissionError:
        raise NERError("permission denied", path=path) from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise NERError(f"not UTF-8 text (byte 0x{data[exc.start]:02x})", path, line) from None


def _parse(text: str, path: str) -> tuple[list[Document], int]:
    """Split into documents of sentences (tags still raw); returns also the column count."""
    docs = [Document([])]
    rows: list[list[str]] = []
    start = first = width = 0

    def flush() -> None:
        if rows:
            words = [cols[0] for cols in rows]
            docs[-1].sentences.append(Sentence(words, [], list(rows), start))
            rows.clear()

    # Only spaces and tabs separate columns: str.split() would also cut at U+00A0, U+3000 etc.
    for number, raw in enumerate(text.replace("\t", " ").split("\n"), 1):
        line = raw.strip(" \r")
        if not line:
            flush()
            continue
        cols = line.split(" ")
        if "" in cols:  # a run of separators
            cols = [c for c in cols if c]
        if cols[0] == DOCSTART:
            flush()
            if docs[-1].sentences or docs[-1].docstart is not None:
                docs.append(Document([]))
            docs[-1].docstart = cols
            continue
        if not width:
            width, first = len(cols), number
        elif len(cols) != width:
            raise NERError(
                f"{len(cols)} columns, but the first token line (line {first}) has {width}",
                path,
                number,
            )
        if not rows:
            start = number
        rows.append(cols)
    flush()
    if not docs[-1].sentences and docs[-1].docstart is None:
        docs.pop()
    if not any(doc.sentences for doc in docs):
        raise NERError("no sentences", path=path)
    return docs, width


def _check_tags(sentences: list[Sentence], raw: list[list[str]], col: int, check, path: str):
    """Raise NERError at the first token (file order) whose raw tag fails `check`."""
    for tag in {t for tags in raw for t in tags}:  # each distinct tag once: the fast path
        try:
            check(tag)
        except ValueError:
            break
    else:
        return
    for s in sentences:
        for i, cols in enumerate(s.columns):
            try:
                check(cols[col])
            except ValueError as exc:
                raise NERError(str(exc), path, s.line + i) from None


def _has_tag_column(width: int, tag_column: int) -> bool:
    return -width <= tag_column < width and tag_column % width != 0


def read_conll(path, scheme: str = "auto", tag_column: int = -1, has_tags: bool = True) -> Corpus:
    """Read a CoNLL column file; tags are converted from its scheme (detected if "auto") to IOB2.

    `has_tags=False`: words only (e.g. prediction input); tags are all "O", columns are kept.
    """
    if scheme != "auto" and scheme not in schemes.SCHEMES:
        raise NERError(
            f"must be auto or one of {', '.join(schemes.SCHEMES)}, not {scheme!r}", path="scheme"
        )
    # Reading makes several lists a token line and none holds a cycle: the cyclic GC would
    # rescan them over and over (more than half the time on eng.train).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _read(str(path), scheme, tag_column, has_tags)
    finally:
        if enabled:
            gc.enable()


def _read(path: str, scheme: str, tag_column: int, has_tags: bool) -> Corpus:
    docs, width = _parse(_read_text(path), path)
    sentences = [s for doc in docs for s in doc.sentences]
    if not has_tags:
        for s in sentences:
            s.tags = ["O"] * len(s.words)
        return Corpus(path, _guess_scheme(sentences, width, tag_column, scheme), docs)
    if width < 2:
        raise NERError("1 column; expected a word and a tag", path, sentences[0].line)
    if not _has_tag_column(width, tag_column):
        raise NERError(
            f"tag column {tag_column} is out of range for {width} columns (0 is the word)",
            path,
            sentences[0].line,
        )
    raw = [[cols[tag_column] for cols in s.columns] for s in sentences]
    _check_tags(sentences, raw, tag_column, schemes.split_tag, path)
    if scheme == "auto":
        scheme = schemes.detect_scheme(raw)
    else:
        _check_tags(sentences, raw, tag_column, lambda t: schemes.check_tag(t, scheme), path)
    for s, tags in zip(sentences, raw, strict=True):
        s.tags = schemes.to_iob2(tags, scheme)
    return Corpus(path, scheme, docs)


def _guess_scheme(sentences: list[Sentence], width: int, tag_column: int, scheme: str) -> str:
    """Untagged input: the configured scheme, else that of a valid tag column, else IOB2."""
    if scheme != "auto":
        return scheme
    if not _has_tag_column(width, tag_column):
        return "IOB2"
    raw = [[cols[tag_column] for cols in s.columns] for s in sentences]
    try:
        return schemes.detect_scheme(raw)
    except ValueError:  # the column holds something other than tags
        return "IOB2"


def subset(corpus: Corpus, indices: Sequence[int]) -> Corpus:
    """The corpus with only the sentences at `indices` (file order), each in its document."""
    keep, start, documents = set(indices), 0, []
    for doc in corpus.documents:
        sentences = [s for i, s in enumerate(doc.sentences, start) if i in keep]
        start += len(doc.sentences)
        if sentences:
            documents.append(Document(sentences, doc.docstart))
    return Corpus(corpus.path, corpus.scheme, documents, corpus.format)


def check_labels(corpus: Corpus, labels: Sequence[str]) -> None:
    """Raise NERError naming the first tag of `corpus` (IOB2) that is not in `labels`."""
    known = set(labels)
    for s in corpus.sentences:
        for i, tag in enumerate(s.tags):
            if tag not in known:
                raise NERError(
                    f"tag {tag!r} is not in the training label set [{', '.join(labels)}]",
                    corpus.path,
                    s.line + i if corpus.format == "conll" else s.line,
                )


def _conll_lines(source: Corpus | Sequence[Sentence], predictions, scheme: str):
    docs = source.documents if isinstance(source, Corpus) else [Document(list(source))]
    sentences = [s for doc in docs for s in doc.sentences]
    if len(predictions) != len(sentences):
        raise ValueError(f"{len(predictions)} predictions for {len(sentences)} sentences")
    pending = iter(predictions)
    for doc in docs:
        if doc.docstart is not None:
            # conlleval wants the same column count on every line, -DOCSTART- included
            yield " ".join([*doc.docstart, "O"]) + "\n\n"
        for s in doc.sentences:
            tags = next(pending)
            if len(tags) != len(s.words):
                raise ValueError(f"line {s.line}: {len(tags)} tags for {len(s.words)} words")
            for cols, tag in zip(s.columns, schemes.from_iob2(tags, scheme), strict=True):
                yield " ".join([*cols, tag]) + "\n"
            yield "\n"


def write_conll(
    path_or_file: str | os.PathLike | IO[str],
    corpus_or_sentences: Corpus | Sequence[Sentence],
    predictions: Sequence[Sequence[str]],
    scheme: str,
) -> None:
    """Write each token line's original columns plus its predicted IOB2 tag converted to `scheme`.

    A path is written atomically (a temporary file in its directory, renamed on success).
    """
    if scheme not in schemes.SCHEMES:
        raise NERError(
            f"must be one of {', '.join(schemes.SCHEMES)}, not {scheme!r}", path="scheme"
        )
    lines = _conll_lines(corpus_or_sentences, predictions, scheme)
    if hasattr(path_or_file, "write"):
        path_or_file.writelines(lines)
        return
    with atomic_write(path_or_file) as out:
        out.writelines(lines)
