"""Character-offset spans -> IOB2 tags of the words `ner tag` splits the same text into
(`text.split_words`), so training and tagging see the same words, or of the words the record
gives itself (`span_tokens`). No span is silently shifted.

Offsets: tools count code points (Python) or UTF-16 units (JavaScript); the two differ after a
character outside the BMP (an emoji). A span that carries its own text is read in whichever unit
makes its offsets cover that text (neither: misaligned); a span without text whose two readings
differ is read in the unit assumed (`offsets`: code points unless told UTF-16), and counted.

A span is misaligned, in the order checked, when it is empty, lies outside its text, covers text
other than its own, holds no word, overlaps (touches a word of) an earlier span of its record,
starts inside a word, or ends inside one (its edges may lie in whitespace: that cuts no word).
The policy says what becomes of misaligned spans: `refuse` (the reader refuses the file),
`expand` (a span cut inside a word widens to the words it touches; the others cannot be mended
and are left out) or `drop` (each is left out). No torch here.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

from ner.corpus.span_records import Record, Span
from ner.corpus.text import split_words

POLICIES = ("refuse", "expand", "drop")
OFFSETS = ("codepoints", "utf16")
KINDS = ("empty", "outside", "text", "no word", "overlap", "start", "end")


@dataclass
class Problem:
    """A misaligned span: where it is, its kind (one of `KINDS`) and what is wrong, in words."""

    line: int
    task: Any
    kind: str
    message: str

    @property
    def where(self) -> str:
        """`task 7: ` for a Label Studio task with an id, else nothing (the line says it)."""
        return "" if self.task is None else f"task {self.task}: "


@dataclass
class Tally:
    """What aligning a file's spans found and did."""

    spans: int = 0  # spans read
    problems: list[Problem] = field(default_factory=list)  # misaligned spans, in file order
    widened: int = 0  # misaligned spans widened to the words they touch (`expand`)
    dropped: int = 0  # misaligned spans left out
    assumed: int = 0  # spans without text whose two offset readings differ: read as assumed
    utf16: int = 0  # spans whose own text matched only the UTF-16 reading


class _Misfit(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def quote(text: str) -> str:
    """`text` in double quotes, with tabs and newlines escaped (messages stay one line)."""
    return json.dumps(text, ensure_ascii=False)


def utf16_index(text: str) -> dict[int, int] | None:
    """UTF-16 offset -> code point offset, at each code point boundary of `text`; None where
    the two count alike (no character outside the BMP)."""
    if text.isascii() or max(map(ord, text)) <= 0xFFFF:
        return None
    index, unit = {}, 0
    for i, char in enumerate(text):
        index[unit] = i
        unit += 2 if ord(char) > 0xFFFF else 1
    index[unit] = len(text)
    return index


def align_record(
    record: Record, policy: str, offsets: str, tally: Tally
) -> tuple[list[str], list[str]]:
    """The words of a record's text and their IOB2 tags from its spans; misaligned spans are
    listed in `tally` and widened or left out as `policy` says (`refuse` leaves them out too:
    the caller refuses the file)."""
    words = split_words(record.text) if record.words is None else record.words
    starts, ends = [s for _, s, _ in words], [e for _, _, e in words]
    tags = ["O"] * len(words)
    units = utf16_index(record.text)
    claimed: dict[int, tuple[Span, tuple[int, int]]] = {}  # word -> the span that holds it
    for span in record.spans:
        tally.spans += 1
        try:
            start, end = _resolve(span, record.text, units, offsets, tally)
            first, last = _words(span, record.text, (start, end), starts, ends, claimed)
        except _Misfit as misfit:
            _left_out(record, misfit, tally)
            continue
        try:
            _check_edges(span, record.text, (start, end), (first, last), words)
        except _Misfit as misfit:
            if policy != "expand":
                _left_out(record, misfit, tally)
                continue
            tally.problems.append(Problem(record.line, record.task, misfit.kind, str(misfit)))
            tally.widened += 1
        tags[first : last + 1] = [f"B-{span.label}"] + [f"I-{span.label}"] * (last - first)
    return [w for w, _, _ in words], tags


def _left_out(record: Record, misfit: _Misfit, tally: Tally) -> None:
    tally.problems.append(Problem(record.line, record.task, misfit.kind, str(misfit)))
    tally.dropped += 1


def _name(span: Span, text: str, covered: tuple[int, int] | None = None) -> str:
    """`span [3, 9) "ohn Sm"`: the offsets as the file gives them, and the text they cover."""
    shown = "" if covered is None else " " + quote(text[covered[0] : covered[1]])
    return f"span [{span.start}, {span.end}){shown}"


def _resolve(span: Span, text: str, units, offsets: str, tally: Tally) -> tuple[int, int]:
    """The span's code point offsets, read as its text (or else `offsets`) says."""
    start, end = span.start, span.end
    if end <= start:
        raise _Misfit("empty", f"{_name(span, text)} is empty" if end == start else
                      f"{_name(span, text)} ends before it starts")  # fmt: skip
    points = (start, end) if start >= 0 and end <= len(text) else None
    utf16 = points if units is None else _pair(units.get(start), units.get(end))
    if span.text is not None:
        if points is not None and text[points[0] : points[1]] == span.text:
            return points
        if utf16 is not None and text[utf16[0] : utf16[1]] == span.text:
            tally.utf16 += 1
            return utf16
        if points is not None or utf16 is not None:
            raise _Misfit("text", f"{_name(span, text)} says {quote(span.text)}, but its "
                          f"offsets cover {_covered(text, points, utf16)}")  # fmt: skip
    elif points != utf16:  # a character outside the BMP comes before the span's end
        tally.assumed += 1
        points = points if offsets == "codepoints" else utf16
    if points is None:
        size = f"{len(text)} characters" + ("" if units is None else f", {max(units)} UTF-16 units")
        raise _Misfit("outside", f"{_name(span, text)} lies outside its text ({size})")
    return points


def _covered(text: str, points, utf16) -> str:
    if points is None or utf16 is None or points == utf16:
        a, b = points or utf16
        return quote(text[a:b])
    return (
        f"{quote(text[points[0] : points[1]])} in code points, "
        f"{quote(text[utf16[0] : utf16[1]])} in UTF-16 units"
    )


def _pair(start: int | None, end: int | None) -> tuple[int, int] | None:
    return None if start is None or end is None else (start, end)


def _words(span, text, covered, starts, ends, claimed) -> tuple[int, int]:
    """The first and last word the span touches; it claims them, or it overlaps a span that
    did."""
    first, last = bisect_right(ends, covered[0]), bisect_left(starts, covered[1]) - 1
    if first > last:
        raise _Misfit("no word", f"{_name(span, text, covered)} holds no word")
    holder = next((claimed[w] for w in range(first, last + 1) if w in claimed), None)
    if holder is not None:
        raise _Misfit("overlap", f"{_name(span, text, covered)} overlaps the "
                      f"{_name(holder[0], text, holder[1])} before it")  # fmt: skip
    for w in range(first, last + 1):
        claimed[w] = (span, covered)
    return first, last


def _check_edges(span, text, covered, touched, words) -> None:
    (first, last), name = touched, _name(span, text, covered)
    if words[first][1] < covered[0]:
        raise _Misfit("start", f"{name} starts inside the word {quote(words[first][0])}")
    if words[last][2] > covered[1]:
        raise _Misfit("end", f"{name} ends inside the word {quote(words[last][0])}")
