"""A small, noisy corpus with other entity types (tweet-like), built from CoNLL-2003 text.

The check that the defaults serve a few thousand tweets as well as CoNLL-2003 (no such corpus
ships on the package registries reachable here, so it is built).

Sentences are drawn at random (seed 0) from eng.train (train), eng.testa (dev) and eng.testb
(test), so no document survives and no -DOCSTART- line is written. Each sentence then gets the
noise of a tweet, all of it seeded: lowercased whole (a third of them), a leading @mention, one
word made a #hashtag, a trailing link (tagged O, as in WNUT-17), and swapped letters in some
words, names included. The four CoNLL types become five with other names, in IOB2: person,
location, group (ORG), nationality (a one-word MISC entity with a demonym's ending: German,
Iraqi, British, Dutch) and other (the rest of MISC).

    ner bench noisy_corpus --out runs/data/tweets [--train 2000 --dev 500 --test 1000]
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from benchmarks.common import load_sentences
from ner.corpus.schemes import split_tag

RENAME = {"PER": "person", "LOC": "location", "ORG": "group"}
# demonyms: Germ-an, Ital-ian, Japan-ese, Brit-ish, Iraq-i, Fren-ch, Dut-ch, Sw-iss
DEMONYM = re.compile(r"^[A-Z][a-z]+(an|ese|ish|i|ch|ss)$")
SIZES = {"train": ("train", 2000), "dev": ("testa", 500), "test": ("testb", 1000)}


def retype(words: list[str], tags: list[str]) -> list[str]:
    """IOB2 `tags` with the five types of this corpus (see the module docstring)."""
    out = []
    for i, tag in enumerate(tags):
        prefix, kind = split_tag(tag)
        if kind == "MISC":
            one_word = prefix == "B" and (i + 1 == len(tags) or tags[i + 1] != "I-MISC")
            kind = "nationality" if one_word and DEMONYM.match(words[i]) else "other"
            if prefix == "I":  # the I- of a multi-word MISC entity, whose B- was "other"
                kind = "other"
        out.append(tag if kind == "" else f"{prefix}-{RENAME.get(kind, kind)}")
    return out


def _typo(word: str, rng: random.Random) -> str:
    """`word` with two adjacent inner letters swapped."""
    i = rng.randrange(1, len(word) - 2)
    return word[:i] + word[i + 1] + word[i] + word[i + 2 :]


def tweetify(words: list[str], tags: list[str], rng: random.Random) -> tuple[list, list]:
    """One sentence with a tweet's noise (see the module docstring); tags follow their words."""
    words, tags = list(words), list(tags)
    words = [
        _typo(w, rng) if len(w) > 3 and w.isalpha() and rng.random() < 0.04 else w for w in words
    ]
    if rng.random() < 0.33:
        words = [w.lower() for w in words]
    plain = [
        i
        for i, (w, t) in enumerate(zip(words, tags, strict=True))
        if t == "O" and w.isalpha() and len(w) > 3
    ]
    if plain and rng.random() < 0.2:
        i = rng.choice(plain)
        words[i] = "#" + words[i]
    if rng.random() < 0.25:
        words, tags = [f"@user{rng.randrange(1000)}", *words], ["O", *tags]
    if rng.random() < 0.15:
        words, tags = [*words, f"https://t.co/{rng.randrange(16**6):06x}"], [*tags, "O"]
    return words, tags


def build(out: Path, sizes: dict[str, tuple[str, int]] = SIZES, seed: int = 0) -> dict[str, int]:
    """Write `out/{train,dev,test}.txt` (`word tag` lines, IOB2); sentences written a split."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (split, size) in sizes.items():
        pool = [(w, t) for w, t in load_sentences(split) if 3 <= len(w) <= 40]
        rng.shuffle(pool)
        lines = []
        for words, tags in pool[:size]:
            words, tags = tweetify(words, retype(words, tags), rng)
            lines += [f"{w} {t}\n" for w, t in zip(words, tags, strict=True)] + ["\n"]
        (out / f"{name}.txt").write_text("".join(lines), encoding="utf-8")
        written[name] = len(pool[:size])
    return written


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/data/tweets")
    p.add_argument("--seed", type=int, default=0)
    for name, (_, size) in SIZES.items():
        p.add_argument(f"--{name}", type=int, default=size, help="sentences")
    args = p.parse_args(argv)
    sizes = {name: (split, getattr(args, name)) for name, (split, _) in SIZES.items()}
    written = build(Path(args.out), sizes, args.seed)
    print(", ".join(f"{n} {k} sentences" for n, k in written.items()), f"in {args.out}")


if __name__ == "__main__":
    main()
