"""The span files annotation tools export, read into `Record`s: a text and its character-offset
spans as the file gives them (`span_alignment` checks them against the words).

- `jsonl-ner`: `ner tag`'s own JSONL: `{"text", "entities": [{"start", "end", "label", "text"}]}`;
- `spacy`: spaCy/Prodigy JSONL: `{"text", "spans": [{"start", "end", "label"}]}`; a record whose
  `answer` is not `accept` (Prodigy's reject / ignore) is left out, as Prodigy's training does;
- `doccano`: JSONL `{"text", "label": [[start, end, "LABEL"], ...]}`;
- `label-studio`: Label Studio's JSON export: a list of tasks, each `data.text` and its first
  annotation that is not cancelled, whose `labels` results are the spans (`value`: `start`, `end`,
  `text`, `labels`; a result of two labels is two spans); a task without one is left out:
  predictions are a model's, not an annotator's, and are never read as annotations.

Every record keeps its 1-based line (where a Label Studio task opens) and task id for messages,
and the words it gives beside its text, if any (`span_tokens`: spaCy's `tokens`, `ner tag`'s
`words`). No torch here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ner.corpus.span_tokens import Words, given_words
from ner.utils.errors import NERError

FORMATS = ("jsonl-ner", "spacy", "doccano", "label-studio")
JSONL_KEYS = {"jsonl-ner": "entities", "spacy": "spans", "doccano": "label"}
_WHITESPACE = re.compile(r"[ \t\r\n]*")  # JSON's whitespace
_TAG = re.compile(r"O|[BIES]-\S+")


@dataclass
class Span:
    """A span as its file gives it: offsets (unchecked), label, and the text it claims to cover."""

    start: int
    end: int
    label: str
    text: str | None = None  # None where the format does not say


@dataclass
class Record:
    """One record (JSONL line or Label Studio task): its text and spans."""

    line: int
    text: str
    spans: list[Span]
    task: Any = None  # the Label Studio task's id
    words: Words | None = None  # the words the record gives (None: the splitter's)


@dataclass
class Records:
    """A span file read: its format, records, and how many were left out, and why."""

    format: str
    records: list[Record]
    total: int  # records (tasks) in the file, left-out ones included
    left_out: Counter = field(default_factory=Counter)  # reason -> records


def is_span_file(head: str) -> bool:
    """Whether a file's first characters (a BOM already dropped) open a span file: a JSON list or
    object, and not a CoNLL line that happens to start with `[` or `{` (`[ O`)."""
    text = head.lstrip()
    if not text or text[0] not in "[{":
        return False
    cols = text.split("\n", 1)[0].split()
    return not (len(cols) >= 2 and _TAG.fullmatch(cols[-1]))


def detect_format(text: str, path: str) -> str:
    """The span format of a file's content: a list of tasks with `data` is Label Studio's; JSONL
    by the key of its first record (`entities`, `spans`, `label`)."""
    start = _WHITESPACE.match(text).end()
    if text.startswith("[", start):
        for line, item in _json_items(text, path):
            if isinstance(item, dict) and "data" in item:
                return "label-studio"
            raise NERError(
                'a JSON list, but not of Label Studio tasks (no "data"; Label Studio\'s "JSON"'
                ' export has it, "JSON-MIN" not)',
                path,
                line,
            )
        raise NERError("an empty JSON list: no task", path=path)
    line = text.count("\n", 0, start) + 1
    record = _load(text[start:].split("\n", 1)[0], path, line)
    for fmt, key in JSONL_KEYS.items():
        if isinstance(record, dict) and key in record:
            return fmt
    keys = ", ".join(f'"{k}"' for k in JSONL_KEYS.values())
    raise NERError(f"a JSON record without {keys}: not a span format ner reads", path, line)


def read_records(text: str, fmt: str, path: str) -> Records:
    """The records of a span file's content in format `fmt` (one of `FORMATS`)."""
    if fmt == "label-studio":
        return _label_studio(text, path)
    key, records, left_out, total = JSONL_KEYS[fmt], [], Counter(), 0
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        total += 1
        obj = _load(line, path, number)
        text_of = _text(obj, path, number)
        if key not in obj:
            raise NERError(f'no "{key}" in this record, where {fmt} keeps its spans', path, number)
        if fmt == "spacy" and obj.get("answer", "accept") != "accept":
            left_out["not accepted"] += 1
            continue
        items = _list(obj[key], key, path, number)
        spans = [_span(item, fmt, path, number) for item in items]
        words = given_words(obj, fmt, path, number)
        records.append(Record(number, text_of, spans, words=words))
    return Records(fmt, records, total, left_out)


def _label_studio(text: str, path: str) -> Records:
    records, left_out, total = [], Counter(), 0
    for line, task in _json_items(text, path):
        total += 1
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise NERError('a task is an object with "data"', path, line)
        where = f"task {task.get('id')}: " if task.get("id") is not None else ""
        text_of = _text(task["data"], path, line, where)
        annotations = task.get("annotations") or []
        done = [a for a in annotations if isinstance(a, dict) and not a.get("was_cancelled")]
        if not done:
            left_out["no annotation"] += 1
            continue
        spans = []
        for result in _list(done[0].get("result") or [], "result", path, line):
            if not isinstance(result, dict) or result.get("type") != "labels":
                continue  # choices, relations, text areas: not spans
            value = result.get("value")
            if not isinstance(value, dict):
                raise NERError(f'{where}a "labels" result without a "value"', path, line)
            for label in _list(value.get("labels"), "labels", path, line):
                spans.append(_span({**value, "label": label}, "label-studio", path, line, where))
        records.append(Record(line, text_of, spans, task.get("id")))
    return Records("label-studio", records, total, left_out)


def _json_items(text: str, path: str):
    """(line, item) of each item of the JSON list `text` holds, where the item opens."""
    decoder, pos, line, counted = json.JSONDecoder(), _WHITESPACE.match(text).end(), 1, 0
    if not text.startswith("[", pos):
        raise NERError("not a JSON list (Label Studio exports one)", path, 1)
    pos = _WHITESPACE.match(text, pos + 1).end()
    while not text.startswith("]", pos):
        line, counted = line + text.count("\n", counted, pos), pos
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise NERError(f"not JSON: {exc.msg}", path, exc.lineno) from None
        yield line, item
        pos = _WHITESPACE.match(text, pos).end()
        if text.startswith(",", pos):
            pos = _WHITESPACE.match(text, pos + 1).end()
        elif not text.startswith("]", pos):
            line = text.count("\n", 0, pos) + 1
            raise NERError('not JSON: expected "," or "]" after a task', path, line)
    if text[pos + 1 :].strip():
        raise NERError("not JSON: more after the list", path, text.count("\n", 0, pos) + 1)


def _load(line: str, path: str, number: int) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise NERError(f"not JSON: {exc.msg} (column {exc.colno})", path, number) from None


def _text(obj: Any, path: str, line: int, where: str = "") -> str:
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        raise NERError(f'{where}no "text" (a string) in this record', path, line)
    return obj["text"]


def _list(value: Any, key: str, path: str, line: int) -> list:
    if not isinstance(value, list):
        raise NERError(f'"{key}" is not a list', path, line)
    return value


def _span(item: Any, fmt: str, path: str, line: int, where: str = "") -> Span:
    """A span of `fmt`: an object with `start`, `end`, `label` (and maybe `text`), or doccano's
    `[start, end, label]`; integer offsets and a label without whitespace, else a one-line
    error."""
    if fmt == "doccano":
        if not isinstance(item, list) or len(item) != 3:
            raise NERError(f"a doccano label is [start, end, label], not {item!r}", path, line)
        item = dict(zip(("start", "end", "label"), item, strict=True))
    if not isinstance(item, dict):
        raise NERError(f"{where}a span is an object with start, end and label", path, line)
    start, end, label, text = (item.get(k) for k in ("start", "end", "label", "text"))
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise NERError(f"{where}span {name} {value!r} is not an integer offset", path, line)
    if not isinstance(label, str) or not label or label != "".join(label.split()):
        # a label becomes the tags B-LABEL and I-LABEL, one column of a CoNLL line
        raise NERError(f"{where}label {label!r} is not a word without spaces", path, line)
    return Span(start, end, label, text if isinstance(text, str) else None)
