"""What a word looks like, as numbers the model can learn from: its casing/shape class and its
UTF-8 bytes. An uncased encoder sees "Paris", "PARIS" and "paris" as the same pieces; these
features give the case back (`ner.modules.word_features`). No torch here."""

from __future__ import annotations

import re
from functools import lru_cache

# Reimers & Gurevych (2017)'s casing classes, padding first (id 0)
SHAPES = (
    "padding",
    "all_lower",
    "initial_capital",
    "all_caps",
    "mixed_case",
    "numeric",
    "has_digit",
    "punctuation",
    "other",
)
SHAPE_ID = {name: i for i, name in enumerate(SHAPES)}
_NUMBER = re.compile(r"[\d.,:/\-+%]*\d[\d.,:/\-+%]*")
CHAR_PAD = 0  # byte b is id b + 1
MAX_BYTES = 24  # bytes a word keeps for the character features (words rarely need more)


def word_shape(word: str) -> str:
    """The casing/shape class of a word, one of `SHAPES[1:]`."""
    if not any(c.isalnum() for c in word):
        return "punctuation"
    if _NUMBER.fullmatch(word):
        return "numeric"  # 1996, 3.5, 1,000, 08-22, 50%
    if any(c.isdigit() for c in word):
        return "has_digit"  # F-16, 2nd
    if word.islower():
        return "all_lower"
    if word.isupper():
        return "all_caps"  # EU, U.S., I
    cased = [c for c in word if c.isupper() or c.islower()]
    if cased and cased[0].isupper() and not any(c.isupper() for c in cased[1:]):
        return "initial_capital"  # Paris, Jean-luc
    if any(c.isupper() for c in cased) and any(c.islower() for c in cased):
        return "mixed_case"  # McDonald, iPhone
    return "other"  # scripts without case


@lru_cache(maxsize=1 << 17)
def shape_id(word: str) -> int:
    """`SHAPE_ID` of the word's shape, remembered: text repeats its words."""
    return SHAPE_ID[word_shape(word)]


def shape_ids(words: list[str]) -> list[int]:
    """`SHAPE_ID` of each word."""
    return list(map(shape_id, words))


def byte_ids(word: str, limit: int = MAX_BYTES) -> list[int]:
    """The word's first `limit` UTF-8 bytes as ids 1..256 (0 pads); at least one id."""
    return [b + 1 for b in word.encode("utf-8", "surrogatepass")[:limit]] or [CHAR_PAD]
