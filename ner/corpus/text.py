"""Raw text <-> words: CoNLL-style word splitting, character offsets, entity spans. No torch."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from seqeval.metrics.sequence_labeling import get_entities

# CoNLL-2003 (Reuters) tokenization: acronyms like "U.S." stay whole, numbers keep their inner
# punctuation ("1,000", "3.5", "1996-08-22"), hyphenated words stay whole, clitics ("'s") and
# every other punctuation mark stand alone.
_WORD = re.compile(r"(?:[^\W\d_]\.){2,}|\w+(?:[-.,/&]\w+)*|'\w+|[^\w\s]", re.UNICODE)

Offsets = list[tuple[int, int]]


def split_words(text: str) -> list[tuple[str, int, int]]:
    """Split raw text into CoNLL-style words with their `[start, end)` character offsets."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def words_and_offsets(item: str | Sequence[str]) -> tuple[list[str], Offsets, str]:
    """Words, their character offsets and the text they index: raw text is split CoNLL-style;
    pre-split words are taken as given, with offsets into the words joined by single spaces."""
    if isinstance(item, str):
        spans = split_words(item)
        return [w for w, _, _ in spans], [(s, e) for _, s, e in spans], item
    words, offsets, pos = list(item), [], 0
    for word in words:
        offsets.append((pos, pos + len(word)))
        pos += len(word) + 1
    return words, offsets, " ".join(words)


def entities_from_tags(
    tags: Sequence[str], scores: Sequence[float], offsets: Sequence[tuple[int, int]], text: str
) -> list[dict[str, Any]]:
    """Entity dicts (`text`, `label`, `start`, `end`, `score`) from word-level IOB2 tags; the
    score is the mean of the entity's word scores."""
    out = []
    for label, first, last in get_entities(list(tags)):
        start, end = offsets[first][0], offsets[last][1]
        score = sum(scores[first : last + 1]) / (last - first + 1)
        out.append(
            {"text": text[start:end], "label": label, "start": start, "end": end, "score": score}
        )
    return out
