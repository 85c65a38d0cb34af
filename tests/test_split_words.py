"""The raw-text splitter (`ner.corpus.text.split_words`), rule by rule: what each keeps whole
and, beside it, what it still cuts (a sentence's last period above all). Expected words are
written by hand, as CoNLL-2003 (Reuters, Penn Treebank conventions) writes them."""

from __future__ import annotations

import pytest

from ner.corpus.text import split_words

CASES = {
    "words and marks": [
        ("EU rejects German call.", "EU rejects German call ."),
        ('"Yes," he said (twice)!', '" Yes , " he said ( twice ) !'),
        ("1,000 3.5 1996-08-22 AT&T", "1,000 3.5 1996-08-22 AT&T"),
    ],
    "acronyms, and compounds of them": [
        ("the U.S. team", "the U.S. team"),
        ("U.S.-led talks, an anti-U.S. rally", "U.S.-led talks , an anti-U.S. rally"),
        ("I.D.E.A and E.C.India", "I.D.E.A and E.C.India"),
    ],
    "abbreviations keep their period, but not at the end": [
        ("Acme Corp. said on Oct. 3", "Acme Corp. said on Oct. 3"),
        ("Mr. Smith of Tampa, Fla., and ST. LOUIS", "Mr. Smith of Tampa , Fla. , and ST. LOUIS"),
        ("a Calif.-based firm", "a Calif.-based firm"),
        ("shares of Acme Corp.", "shares of Acme Corp ."),
        ("he fell ill. then mass. ended", "he fell ill . then mass . ended"),
    ],
    "initials keep their period, but not at the end": [
        ("M. Jones and J. Smith", "M. Jones and J. Smith"),
        ("Plan B.", "Plan B ."),
        ("T.O'Gorman", "T.O'Gorman"),
    ],
    "a place opening the text keeps its mark": [
        ("3. Bonn 13 points", "3. Bonn 13 points"),
        ("  1= Andrei Tiwontschik", "1= Andrei Tiwontschik"),
        ("it won 3. Then it lost", "it won 3 . Then it lost"),
        ("in 1996. Then", "in 1996 . Then"),
        ("1996. Then", "1996 . Then"),
        ("3.", "3 ."),
    ],
    "clitics stand alone, n't as in the Penn Treebank": [
        ("didn't can't DON'T", "did n't ca n't DO N'T"),
        ("John's I'm we're you've they'll she'd", "John 's I 'm we 're you 've they 'll she 'd"),
        ("n't 's", "n't 's"),
        ("John\u2019s car didn\u2019t", "John \u2019s car did n\u2019t"),
    ],
    "an apostrophe inside a name stays": [
        ("O'Brien's d'Italia N'Djamena Gov't", "O'Brien 's d'Italia N'Djamena Gov't"),
        ("'Hello' Jones' car", "' Hello ' Jones ' car"),
    ],
    "a run of one mark is one word": [
        ("wait... then -- or --- !!!", "wait ... then -- or --- !!!"),
        ("Paris--London ?!", "Paris -- London ? !"),
    ],
    "numbers: sign, leading point, times and scores": [
        ("+0.435 -5 .496 +48", "+0.435 -5 .496 +48"),
        ("at 4:08.22 and 20:36:54, won 1:7", "at 4:08.22 and 20:36:54 , won 1:7"),
        ("3-5 Tel+44 costs $.50", "3-5 Tel + 44 costs $ .50"),
        ("at 10:30am", "at 10:30am"),
    ],
    "currencies, suspended hyphens, plus grades": [
        ("C$ 100 and US$5", "C$ 100 and US$ 5"),
        ("pre- and post-war, rated AA- or BBB+", "pre- and post-war , rated AA- or BBB+"),
        ("in C++, or C#", "in C++ , or C #"),
        ("1+1 or AA-,", "1 + 1 or AA - ,"),
    ],
    "e-mail and web addresses": [
        ("mail jeffrey.hodgson@reuters.com.", "mail jeffrey.hodgson@reuters.com ."),
        ("see http://www.pt.lu/infoweb/x).", "see http://www.pt.lu/infoweb/x ) ."),
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    "text, expected",
    [case for cases in CASES.values() for case in cases],
    ids=[f"{rule}: {text}" for rule, cases in CASES.items() for text, _ in cases],
)
def test_split_words(text, expected):
    words = split_words(text)
    assert [w for w, _, _ in words] == expected.split(" ")
    assert all(text[s:e] == w for w, s, e in words)


def test_long_runs_split_in_linear_time():
    # what could make a regular expression backtrack: long runs near an address or a clitic
    for text in ("a+" * 20000, "x@" * 20000, "a'" * 20000, "n't" * 10000, "1:" * 20000):
        words = split_words(text)
        assert "".join(w for w, _, _ in words) == text
