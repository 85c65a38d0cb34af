"""Training files of any format -> `Corpus`: CoNLL (`reader`), or a span file an annotation tool
exports (`span_records`), whose spans become IOB2 tags of the words `ner tag` splits the same
text into (`span_alignment`), so everything downstream reads it as it reads CoNLL.

A span record (a JSONL line, a Label Studio task) is one document of one sentence, as a line of
text is to `ner tag`: its text is one passage, not cut into sentences, and no record is context
for another. A record without words is left out. The format is `CorpusFormat.format`, or the
content's (`auto`): a JSON list or JSONL record is a span file, anything else CoNLL. A file with
misaligned spans is refused with a one-line error unless a policy (`expand`, `drop`) says what
to do; what a policy changed, and every offset reading that rests on an assumption, is said on
stderr (`note`). No torch here.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ner.corpus.reader import Corpus, Document, Sentence, _read_text, read_conll
from ner.corpus.span_alignment import KINDS, OFFSETS, POLICIES, Tally, align_record
from ner.corpus.span_records import FORMATS as SPAN_FORMATS
from ner.corpus.span_records import detect_format, is_span_file, read_records
from ner.utils.errors import NERError

FORMATS = ("auto", "conll", *SPAN_FORMATS)
HEAD_BYTES = 4096  # what `auto` reads of a file to tell CoNLL from a span file
LISTED = 50  # misaligned spans `ner inspect` lists (its --json lists them all)
REASONS = {"no annotation": "without an annotation", "not accepted": "not accepted",
           "no words": "without words"}  # fmt: skip


def plural(count: int, noun: str) -> str:
    """`1 span`, `3 spans`."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


@dataclass(frozen=True)
class CorpusFormat:
    """How training files are read (`--data.format`, `--data.scheme`, `--data.tag_column`,
    `--data.misaligned`, `--data.offsets`); a value out of its choices is a one-line error."""

    format: str = "auto"
    scheme: str = "auto"  # CoNLL files only: span files are IOB2 by construction
    tag_column: int = -1  # CoNLL files only
    misaligned: str = "refuse"  # span files only: refuse, expand or drop
    offsets: str = "codepoints"  # span files only: the unit of spans without text, where it matters

    def __post_init__(self) -> None:
        choices = {"format": FORMATS, "misaligned": POLICIES, "offsets": OFFSETS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                value = getattr(self, name)
                raise NERError(
                    f"must be one of {', '.join(allowed)}, not {value!r}", f"data.{name}"
                )


@dataclass
class SpanReport:
    """What reading a span file found: records, spans, misaligned spans, offset readings."""

    path: str
    format: str
    records: int  # records (tasks) in the file
    left_out: dict[str, int]  # reason -> records left out
    tally: Tally
    policy: str
    offsets: str

    def stats(self) -> dict[str, Any]:
        """The counts, JSON-ready (`ner inspect --json`)."""
        kinds = Counter(p.kind for p in self.tally.problems)
        return {
            "format": self.format,
            "records": self.records,
            "records_left_out": self.left_out,
            "spans": self.tally.spans,
            "misaligned": {kind: kinds[kind] for kind in KINDS if kinds[kind]},
            "misaligned_spans": [
                {"line": p.line, "task": p.task, "kind": p.kind, "message": p.message}
                for p in self.tally.problems
            ],
            "misaligned_policy": self.policy,
            "misaligned_widened": self.tally.widened,
            "misaligned_left_out": self.tally.dropped,
            "offsets_assumed": self.offsets,
            "spans_read_as_assumed": self.tally.assumed,
            "spans_read_as_utf16_by_their_text": self.tally.utf16,
        }

    def notes(self) -> list[str]:
        """What a training run says on stderr: changes made, assumptions, records left out."""
        tally, out = self.tally, []
        if tally.problems and self.policy != "refuse":
            out.append(f"{plural(len(tally.problems), 'misaligned span')}: {tally.widened:,} "
                       f"widened to the words they touch, {tally.dropped:,} left out "
                       f"(--data.misaligned {self.policy})")  # fmt: skip
        out += offsets_lines(tally.assumed, tally.utf16, self.offsets, "--data.offsets")
        if self.left_out:
            out.append(f"{sum(self.left_out.values()):,} of {plural(self.records, 'record')} left "
                       f"out ({left_out_text(self.left_out)})")  # fmt: skip
        return [f"{self.path}: {line}" for line in out]


def offsets_lines(assumed: int, utf16: int, offsets: str, option: str) -> list[str]:
    """What rests on the offsets' unit: spans read as assumed, spans read in UTF-16 units."""
    out = []
    if assumed:
        unit = "code points" if offsets == "codepoints" else "UTF-16 units"
        other = f"{option} utf16 to read UTF-16 units" if offsets == "codepoints" else "as "
        other += "" if offsets == "codepoints" else f"{option} utf16 says"
        out.append(f"{plural(assumed, 'span')} without text after a character outside the BMP: "
                   f"offsets read as {unit} ({other})")  # fmt: skip
    if utf16:
        whose = "its" if utf16 == 1 else "their"
        out.append(f"{plural(utf16, 'span')} read in UTF-16 units, as {whose} own text says")
    return out


def left_out_text(left_out: dict[str, int]) -> str:
    """`2 without an annotation, 1 without words`."""
    return ", ".join(f"{n} {REASONS.get(reason, reason)}" for reason, n in left_out.items())


def is_span_path(path: str) -> bool:
    """Whether the file at `path` opens as a span file (`span_records.is_span_file`); a path
    that cannot be read is left to the CoNLL reader, which says why."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return False
    return is_span_file(head.decode("utf-8", "ignore").lstrip("\ufeff"))


def read_spans(
    path: str, fmt: str = "auto", policy: str = "refuse", offsets: str = "codepoints"
) -> tuple[Corpus, SpanReport]:
    """A span file (format `fmt`, or its content's for `auto`) as a `Corpus` of IOB2 tags, and
    its report. Misaligned spans are widened or left out as `policy` says (`refuse` leaves them
    out: `read_corpus` refuses the file); nothing is raised for them here."""
    text = _read_text(path)  # the CoNLL reader's one-line errors (missing, not UTF-8, ...)
    fmt = detect_format(text, path) if fmt == "auto" else fmt
    found = read_records(text, fmt, path)
    tally, documents, left_out = Tally(), [], Counter(found.left_out)
    for record in found.records:
        words, tags = align_record(record, policy, offsets, tally)
        if not words:
            left_out["no words"] += 1
            continue
        columns = [[w, t] for w, t in zip(words, tags, strict=True)]
        documents.append(Document([Sentence(words, tags, columns, record.line)]))
    report = SpanReport(path, fmt, found.total, dict(left_out), tally, policy, offsets)
    if not documents:
        why = f": {left_out_text(report.left_out)}" if report.left_out else ""
        raise NERError(f"no record with words to train on ({found.total} records{why})", path)
    return Corpus(path, "IOB2", documents, fmt), report


def read_any(path, reading: CorpusFormat) -> tuple[Corpus, SpanReport | None]:
    """Any training file as a `Corpus`, with its span report (None for CoNLL); misaligned
    spans never raise here (`ner inspect` lists them)."""
    path, fmt = str(path), reading.format
    if fmt == "conll" or (fmt == "auto" and not is_span_path(path)):
        return read_conll(path, reading.scheme, reading.tag_column), None
    return read_spans(path, fmt, reading.misaligned, reading.offsets)


def read_corpus(
    path, reading: CorpusFormat | None = None, note: Callable[[str], None] = _stderr
) -> Corpus:
    """A training file as a `Corpus`. A span file with misaligned spans and no policy is a
    one-line error naming the first and the count; what a policy or an assumption did is said
    through `note`."""
    corpus, report = read_any(path, reading or CorpusFormat())
    if report is None:
        return corpus
    problems = report.tally.problems
    if problems and report.policy == "refuse":
        first, n = problems[0], len(problems)
        raise NERError(
            f"{first.where}{first.message} ({n} misaligned span{'s' if n > 1 else ''} in all;"
            " --data.misaligned expand|drop to change them)",
            report.path,
            first.line,
        )
    for line in report.notes():
        note(line)
    return corpus


def format_span_stats(stats: dict[str, Any]) -> str:
    """The rows `ner inspect` adds for a span file (`SpanReport.stats`), and its misaligned
    spans, `LISTED` at most."""
    records = f"{stats['records']:,}"
    if stats["records_left_out"]:
        gone = stats["records_left_out"]
        records += f" ({sum(gone.values()):,} left out: {left_out_text(gone)})"
    kinds = ", ".join(f"{kind} {n:,}" for kind, n in stats["misaligned"].items())
    bad = stats["misaligned_spans"]
    misaligned = f"{len(bad):,}" + (f" ({kinds})" if kinds else "")
    if bad and stats["misaligned_policy"] == "refuse":
        misaligned += ": left out of the counts above; ner fit refuses the file unless "
        misaligned += "--data.misaligned expand|drop"
    elif bad:
        misaligned += f": {stats['misaligned_widened']:,} widened, "
        misaligned += f"{stats['misaligned_left_out']:,} left out (--misaligned "
        misaligned += f"{stats['misaligned_policy']})"
    offsets = offsets_lines(stats["spans_read_as_assumed"],
                            stats["spans_read_as_utf16_by_their_text"],
                            stats["offsets_assumed"], "--offsets")  # fmt: skip
    offsets = offsets or ["no span's reading rests on an assumption"]
    rows = [("format", stats["format"]), ("records", records), ("spans", f"{stats['spans']:,}"),
            ("misaligned spans", misaligned), ("offsets", "; ".join(offsets))]  # fmt: skip
    lines = [f"  {label:<16}  {value}" for label, value in rows]
    for p in bad[:LISTED]:
        task = "" if p["task"] is None else f"task {p['task']}: "
        lines.append(f"    line {p['line']}: {task}{p['message']}")
    if len(bad) > LISTED:
        lines.append(f"    ... and {len(bad) - LISTED:,} more (--json lists them all)")
    return "\n".join(lines)
