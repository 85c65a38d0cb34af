"""Raw text <-> words: CoNLL-style word splitting, character offsets, entity spans. No torch."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from seqeval.metrics.sequence_labeling import get_entities

# Abbreviations that keep their period, as Reuters (and so CoNLL-2003) writes them: titles,
# company suffixes, months, US states in AP style. Only as listed or in capitals, so that a
# sentence ending in "ill." or "mass." still ends with a period.
ABBREVIATIONS = (
    "Mr Mrs Ms Dr Prof Rev Gen Gov Sen Rep Lt Col Capt Sgt Maj Cmdr Adm Jr Sr St Mt Ft vs "
    "Inc Corp Co Cos Ltd Bros Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec "
    "Ala Ariz Ark Calif Colo Conn Del Fla Ga Ill Ind Kan Ky La Md Mass Mich Minn Miss Mo Mont "
    "Neb Nev Okla Ore Pa Tenn Tex Va Vt Wash Wis Wyo"
).split()
_ABBREVIATION = "|".join(sorted({*ABBREVIATIONS, *(a.upper() for a in ABBREVIATIONS)}, key=len,
                                reverse=True))  # fmt: skip
_APOSTROPHE = "['\u2019]"  # typed or typographic
_CLITIC = r"(?i:s|re|ve|ll|d|m)(?!\w)"  # 's 're 've 'll 'd 'm after an apostrophe: words alone
_NT = rf"[nN]{_APOSTROPHE}[tT](?!\w)"  # "didn't" is "did" "n't", as in the Penn Treebank
_LETTERS = rf"(?:(?!{_NT})\w)+"  # a run of word characters that stops before "n't"
_JOINED = rf"""(?:(?:[-.,/&]                   # joined without spaces: 1,000 3.5 1996-08-22 AT&T
                  |(?<=\d):(?=\d)              #   times and scores: 4:08.22 1:7
                  |{_APOSTROPHE}(?!{_CLITIC})  #   names: O'Brien d'Italia Gov't
                 ){_LETTERS})*"""
_COMPOUND = rf"(?:-{_LETTERS}{_JOINED})?"  # "U.S.-led", "Calif.-based": one hyphenated word
_KEEPS_PERIOD = r"\.(?!\w|\s*\Z)"  # an abbreviation's period, unless the text ends there
# CoNLL-2003 (Reuters) tokenization; the first alternative that matches wins
_WORD = re.compile(
    rf"""
    (?:https?|ftp)://\S*[\w/]                       # web addresses
    | \w[\w.+-]{{0,63}}@\w[\w-]*(?:\.\w[\w-]*)+      # e-mail addresses (a local part is short)
    | (?:[^\W\d_]\.){{2,}}(?!\w){_COMPOUND}         # acronyms: U.S.
    | (?<![\w.])(?:{_ABBREVIATION}){_KEEPS_PERIOD}{_COMPOUND}  # Corp. Oct. Calif.
    | (?<![\w.])[A-Z]{_KEEPS_PERIOD}                # initials: M. Jones
    | (?<![\w$])[A-Z]{{1,3}}\$                      # currencies: C$ US$
    | {_NT}
    | (?:(?<![\w.+-])[+-]?\.?(?=\d))?               # a number's sign or leading point: -5 .496
      {_LETTERS}{_JOINED}                           # a word
      (?:(?<=(?<![^\W\d_])[^\W\d_]\.[^\W\d_])\.(?!\w)  # ending in an acronym: anti-U.S.
        |-(?=\s|\Z)                                 # a suspended hyphen: pre- and post-war
        |\++(?![\w+])                               # C++ BBB+
      )?
    | {_APOSTROPHE}{_CLITIC}
    | ([-.!?*=~#+'`])\1+                            # a run of one mark: -- ... !!
    | [^\w\s]                                       # any other mark stands alone
    """,
    re.UNICODE | re.VERBOSE,
)
# a list item's or a result's place opening the text: "3. Bonn", "1= Smith" (tied first)
_PLACE = re.compile(r"\s*\d{1,3}[.=]\s+\S")

Offsets = list[tuple[int, int]]


def split_words(text: str) -> list[tuple[str, int, int]]:
    """Split raw text into CoNLL-style words with their `[start, end)` character offsets."""
    words = [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]
    if len(words) > 1 and _PLACE.match(text):
        # the mark numbers a place and ends no sentence: one word, as CoNLL-2003 keeps "3."
        words[:2] = [(text[words[0][1] : words[1][2]], words[0][1], words[1][2])]
    return words


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
