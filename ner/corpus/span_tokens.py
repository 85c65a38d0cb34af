"""The words a span record carries beside its text, so that a record read back has the words it
was written with, not those the raw-text splitter (`text.split_words`) would cut its text into:
CoNLL words such as "oOo-----" that the splitter cuts, words tagged before a splitter change.

- `spacy`: spaCy/Prodigy's `tokens`, `[{"text", "start", "end", "id", "ws"}]` (code point
  offsets; spaCy's whitespace tokens are no words), and `token_start`/`token_end` (inclusive)
  in each span, as Prodigy's manual NER interface wants them; `ner tag` always writes them;
- `jsonl-ner`: `words`, the words in order, each where the text next holds it after whitespace;
  `ner tag` writes them only where the splitter would not give them back.

doccano and Label Studio have no place for words: their records are read with the splitter.
Given words that are not what their text holds are a one-line error. No torch here.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from typing import Any

from ner.corpus.text import Offsets, split_words
from ner.utils.errors import NERError

Words = list[tuple[str, int, int]]  # (word, start, end), as `split_words` gives them
GIVEN_KEYS = {"spacy": "tokens", "jsonl-ner": "words"}
_SPACE = re.compile(r"\s*")


def resplit_differs(words: list[str], offsets: Offsets, text: str) -> bool:
    """Whether the splitter cuts `text` into other words than `words` at `offsets`."""
    split = split_words(text)
    return len(split) != len(words) or any(
        (w, s, e) != (word, start, end)
        for (w, s, e), word, (start, end) in zip(split, words, offsets, strict=False)
    )


def prodigy_tokens(words: list[str], offsets: Offsets, text: str) -> list[dict[str, Any]]:
    """The words as spaCy/Prodigy tokens (`ws`: whitespace follows the word)."""
    return [
        {"text": w, "start": s, "end": e, "id": i, "ws": text[e : e + 1].isspace()}
        for i, (w, (s, e)) in enumerate(zip(words, offsets, strict=True))
    ]


def token_span(offsets: Offsets, start: int, end: int) -> dict[str, int]:
    """Prodigy's `token_start` and (inclusive) `token_end` of a span on word edges."""
    starts, ends = [s for s, _ in offsets], [e for _, e in offsets]
    return {"token_start": bisect_left(starts, start), "token_end": bisect_right(ends, end) - 1}


def given_words(obj: dict[str, Any], fmt: str, path: str, line: int) -> Words | None:
    """The words a record of `fmt` gives itself (None where it gives none), checked against its
    `text`: a one-line error where they are not what the text holds."""
    key = GIVEN_KEYS.get(fmt)
    if key is None or obj.get(key) is None:
        return None
    value, text = obj[key], obj["text"]
    if not isinstance(value, list):
        raise NERError(f'"{key}" is not a list', path, line)
    if fmt == "spacy":
        return _tokens(value, text, path, line)
    return _located(value, text, path, line)


def _tokens(tokens: list, text: str, path: str, line: int) -> Words:
    words, pos = [], 0
    for i, token in enumerate(tokens):
        if not isinstance(token, dict):
            raise NERError(f"token {i} is not an object with text, start and end", path, line)
        word, start, end = token.get("text"), token.get("start"), token.get("end")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            raise NERError(f"token {i}: start and end are not integer offsets", path, line)
        if start < pos or end < start:
            raise NERError(f"token {i} [{start}, {end}) overlaps the token before", path, line)
        if end > len(text) or text[start:end] != word:
            held = repr(text[start:end]) if end <= len(text) else "nothing"
            raise NERError(f"token {i} [{start}, {end}) says {word!r}, the text holds {held}",
                           path, line)  # fmt: skip
        pos = end
        if word.strip():  # spaCy's tokens of extra whitespace are no words
            words.append((word, start, end))
    return words


def _located(items: list, text: str, path: str, line: int) -> Words:
    words, pos = [], 0
    for i, word in enumerate(items):
        if not isinstance(word, str) or not word.strip():
            raise NERError(f"word {i} {word!r} is not a word", path, line)
        start = _SPACE.match(text, pos).end()
        if not text.startswith(word, start):
            raise NERError(f"word {i} {word!r} is not where the text goes on "
                           f"({text[start : start + len(word)]!r})", path, line)  # fmt: skip
        words.append((word, start, start + len(word)))
        pos = start + len(word)
    if text[pos:].strip():
        raise NERError(f"the words end before the text does ({text[pos:]!r} is left)", path, line)
    return words
