"""What `ner serve` accepts and answers: request validation, its limits and the JSON shapes.

A request is a JSON object with exactly one of `text` (a string), `texts` (a list of strings) or
`tokens` (a list of pre-split word lists), and optionally `word_tags` (true: each result also
lists its words with their IOB2 tags and scores). Each text is one passage, as one line of
`ner tag`'s text input: split CoNLL-style, windowed by the alignment however long it is, and
tagged by THE inference routine, so its entities, offsets and scores are the ones `ner tag` writes
for that line. Offsets count Unicode code points (Python's `str` indices), as `ner tag`'s do.

Bad requests are `RequestError`s: a status (400 unreadable, 413 over a limit, 422 the wrong
shape) and one line that names the field. The HTTP process validates, so the inference worker
only ever sees well-formed work.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ner.corpus.text import entities_from_tags, words_and_offsets
from ner.inference.routine import Tagger, iter_tags

FIELDS = ("text", "texts", "tokens")
OPTIONS = ("word_tags",)
OFFSET_UNIT = "unicode_code_point"
# what a text may not hold: control characters (C0, DEL, C1) except those the word splitter takes
# for whitespace (tab, line feed, vertical tab, form feed, carriage return, next line), and
# surrogates (JSON's `\ud800` escapes decode to lone ones, which no UTF-8 answer can hold)
_BAD_CHARACTER = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff]")
_WHITESPACE = re.compile(r"\s")


class RequestError(Exception):
    """A bad request: its HTTP status and a one-line message naming the field."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Limits:
    """What one request may hold; beyond it the answer is 413 with a one-line error.

    Args:
        max_chars: characters of all its texts together (pre-split words count one space
            between neighbours).
        max_texts: texts (or word lists) in one request.
    """

    max_chars: int = 1_000_000
    max_texts: int = 1_000

    @property
    def max_body(self) -> int:
        """Bytes of a request body: room for every character written as a 6-byte `\\uXXXX`
        escape, plus 64 KiB of JSON around them. Larger bodies are refused unread."""
        return 6 * self.max_chars + 65_536

    def as_dict(self) -> dict[str, int]:
        """The limits for `/info`."""
        return {**asdict(self), "max_body_bytes": self.max_body}


def _kind(value: Any) -> str:
    """JSON's name of a value's type, for messages."""
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return names.get(type(value), type(value).__name__)


def check_text(text: str, where: str) -> None:
    """A one-line 422 if `text` holds a character no text may hold."""
    bad = _BAD_CHARACTER.search(text)
    if bad:
        what = "unpaired surrogate" if "\ud800" <= bad.group() <= "\udfff" else "control character"
        raise RequestError(
            422, f"{where}: {what} U+{ord(bad.group()):04X} at offset {bad.start()} (of the"
            " control characters, only tab, line and page breaks and carriage return may appear)"
        )  # fmt: skip


def _texts(value: Any, field: str, limits: Limits) -> list[str]:
    if field == "text":
        if not isinstance(value, str):
            raise RequestError(422, f"text: must be a string, not {_kind(value)}")
        check_text(value, "text")
        return [value]
    if not isinstance(value, list):
        raise RequestError(422, f"texts: must be a list of strings, not {_kind(value)}")
    _count(len(value), "texts", limits)
    for i, text in enumerate(value):
        if not isinstance(text, str):
            raise RequestError(422, f"texts[{i}]: must be a string, not {_kind(text)}")
        check_text(text, f"texts[{i}]")
    return value


def _tokens(value: Any, limits: Limits) -> list[list[str]]:
    if not isinstance(value, list):
        raise RequestError(422, f"tokens: must be a list of word lists, not {_kind(value)}")
    _count(len(value), "tokens", limits)
    for i, words in enumerate(value):
        if not isinstance(words, list):
            raise RequestError(422, f"tokens[{i}]: must be a list of strings, not {_kind(words)}")
        for j, word in enumerate(words):
            where = f"tokens[{i}][{j}]"
            if not isinstance(word, str):
                raise RequestError(422, f"{where}: must be a string, not {_kind(word)}")
            if not word or _WHITESPACE.search(word):
                raise RequestError(422, f"{where}: a word must be non-empty, without whitespace")
            check_text(word, where)
    return value


def _count(count: int, field: str, limits: Limits) -> None:
    if count > limits.max_texts:
        raise RequestError(
            413, f"{field}: {count:,} texts, over the cap of {limits.max_texts:,} a request"
            " (ner serve --max-texts)"
        )  # fmt: skip


def characters(items: Iterable[str | Sequence[str]]) -> int:
    """Characters of the texts as tagged (word lists joined by single spaces)."""
    return sum(
        len(i) if isinstance(i, str) else sum(map(len, i)) + max(len(i) - 1, 0) for i in items
    )


def decode_body(body: bytes, limits: Limits) -> Any:
    """The JSON value of a request body, or a one-line 400/413 saying why there is none."""
    if len(body) > limits.max_body:
        raise RequestError(
            413, f"request body: {len(body):,} bytes, over the cap of {limits.max_body:,}"
            " (6 bytes a character of ner serve --max-chars, plus 64 KiB)"
        )  # fmt: skip
    if not body.strip():
        raise RequestError(400, 'request body: empty; send JSON such as {"text": "..."}')
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = body[exc.start]
        raise RequestError(
            400, f"request body: not UTF-8 (byte 0x{byte:02x} at offset {exc.start})"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise RequestError(400, f"request body: not JSON ({exc.msg} at {where})") from None
    except RecursionError:
        raise RequestError(400, "request body: JSON nested too deeply") from None


def parse_request(body: bytes, limits: Limits) -> dict[str, Any]:
    """The work a request body asks for, `{"items": [...], "word_tags": bool}` (each item a
    text or a word list), or a `RequestError`."""
    data = decode_body(body, limits)
    if not isinstance(data, dict):
        raise RequestError(422, f"request body: must be a JSON object, not {_kind(data)}")
    unknown = sorted(set(data) - set(FIELDS) - set(OPTIONS))
    if unknown:
        raise RequestError(
            422, f"{unknown[0]}: unknown field (a request has one of text, texts, tokens,"
            " and optionally word_tags)"
        )  # fmt: skip
    given = [f for f in FIELDS if f in data]
    if len(given) != 1:
        found = " and ".join(given) if given else "none"
        raise RequestError(422, f"request body: give exactly one of text, texts, tokens ({found})")
    field = given[0]
    value = data[field]
    items = _tokens(value, limits) if field == "tokens" else _texts(value, field, limits)
    size = characters(items)
    if size > limits.max_chars:
        raise RequestError(
            413, f"{field}: {size:,} characters, over the cap of {limits.max_chars:,} a request"
            " (ner serve --max-chars)"
        )  # fmt: skip
    word_tags = data.get("word_tags", False)
    if not isinstance(word_tags, bool):
        raise RequestError(422, f"word_tags: must be true or false, not {_kind(word_tags)}")
    return {"items": items, "word_tags": word_tags}


def answer(prepared: tuple[list[str], list, str], tagged: Any, word_tags: bool) -> dict:
    """One text's result: its text and entities (as `ner tag`'s JSONL record has them), and its
    words with their IOB2 tags and scores if asked."""
    _, offsets, text = prepared
    tags, scores = tagged
    entities = entities_from_tags(tags, scores, offsets, text)
    result: dict[str, Any] = {"text": text, "entities": entities}
    if word_tags:
        result["words"] = [
            {"text": text[s:e], "start": s, "end": e, "tag": tag, "score": score}
            for (s, e), tag, score in zip(offsets, tags, scores, strict=True)
        ]
    return result


def tag_requests(model: Tagger, requests: Sequence[dict[str, Any]], **kwargs: Any) -> list[dict]:
    """The answers to validated requests (`parse_request`), tagged together: their texts go
    through THE inference routine as one input, in length-sorted batches under the model's
    piece budget (`ner.inference.routine.map_batches`; `kwargs` are its options)."""
    prepared = [words_and_offsets(item) for r in requests for item in r["items"]]
    tagged = iter_tags(model, (words for words, _, _ in prepared), **kwargs)
    pairs = iter(zip(prepared, tagged, strict=True))
    return [
        {
            "offset_unit": OFFSET_UNIT,
            "results": [answer(p, t, r["word_tags"]) for p, t in (next(pairs) for _ in r["items"])],
        }
        for r in requests
    ]
