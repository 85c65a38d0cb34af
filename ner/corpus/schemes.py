"""Tagging schemes: IOB1, IOB2 (BIO) and BIOES. Inside the program every sequence is IOB2."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

SCHEMES = ("IOB1", "IOB2", "BIOES")
PREFIXES = {"IOB1": "BI", "IOB2": "BI", "BIOES": "BIES"}


def split_tag(tag: str) -> tuple[str, str]:
    """`"B-PER"` -> `("B", "PER")`; `"O"` -> `("O", "")`. Raises ValueError on anything else."""
    if tag == "O":
        return "O", ""
    if len(tag) > 2 and tag[1] == "-" and tag[0] in "BIES":
        return tag[0], tag[2:]
    raise ValueError(f"tag {tag!r} is not O or B-/I-/E-/S- followed by a type")


def check_tag(tag: str, scheme: str) -> None:
    """Raise ValueError if `tag` cannot occur in `scheme`."""
    prefix, _ = split_tag(tag)
    if prefix != "O" and prefix not in PREFIXES[scheme]:
        raise ValueError(f"tag {tag!r} is not in the {scheme} scheme")


def detect_scheme(sentences: Iterable[Sequence[str]]) -> str:
    """Guess a corpus's scheme: E-/S- means BIOES; an entity opened by I- means IOB1; else IOB2."""
    iob1 = False
    for tags in sentences:
        prev = "O"
        for tag in tags:
            prefix, kind = split_tag(tag)
            if prefix in "ES":
                return "BIOES"
            if prefix == "I" and (prev == "O" or split_tag(prev)[1] != kind):
                iob1 = True
            prev = tag
    return "IOB1" if iob1 else "IOB2"


def to_iob2(tags: Sequence[str], scheme: str) -> list[str]:
    """Convert one sentence's tags from `scheme` to IOB2."""
    out = []
    prev_prefix, prev_kind = "O", ""
    for tag in tags:
        prefix, kind = split_tag(tag)
        if prefix == "O":
            out.append("O")
        else:
            # An entity starts at B- (and S-), at a change of type, and, in BIOES, after an
            # entity closed by E-/S-; an I-/E- that opens an entity is repaired to B-, as conlleval
            # reads it.
            starts = prefix in "BS" or prev_kind != kind or prev_prefix in "ES"
            out.append(("B-" if starts else "I-") + kind)
        prev_prefix, prev_kind = prefix, kind
    return out


def from_iob2(tags: Sequence[str], scheme: str) -> list[str]:
    """Convert one sentence's IOB2 tags to `scheme`."""
    out = []
    n = len(tags)
    for i, tag in enumerate(tags):
        prefix, kind = split_tag(tag)
        if prefix == "O":
            out.append("O")
            continue
        nxt = split_tag(tags[i + 1]) if i + 1 < n else ("O", "")
        continues = nxt == ("I", kind)
        if scheme == "IOB2":
            out.append(tag)
        elif scheme == "IOB1":
            prev_kind = split_tag(tags[i - 1])[1] if i > 0 else ""
            # B- only where an entity directly follows another of the same type
            out.append(("B-" if prefix == "B" and prev_kind == kind else "I-") + kind)
        elif prefix == "B":
            out.append(("B-" if continues else "S-") + kind)
        else:
            out.append(("I-" if continues else "E-") + kind)
    return out


def is_valid_iob2(tags: Sequence[str]) -> bool:
    """True if no `I-X` opens an entity (at the start, after `O`, or after another type)."""
    prev = "O"
    for tag in tags:
        prefix, kind = split_tag(tag)
        if prefix == "I" and (prev == "O" or split_tag(prev)[1] != kind):
            return False
        prev = tag
    return True


def entity_type(tag: str) -> str:
    """The type a tag names (`B-PER`, `I-PER` -> `PER`); `O` stays `O`."""
    return split_tag(tag)[1] or "O"


def entity_types(tags: Iterable[str]) -> set[str]:
    """The entity types named by a collection of tags."""
    return {split_tag(t)[1] for t in tags if t != "O"}


def label_list(types: Iterable[str]) -> list[str]:
    """The IOB2 label set for `types`: `O`, then `B-T`, `I-T` for each type in sorted order."""
    labels = ["O"]
    for kind in sorted(set(types)):
        labels += [f"B-{kind}", f"I-{kind}"]
    return labels


def allowed_transitions(labels: Sequence[str]) -> tuple[list[bool], list[list[bool]]]:
    """IOB2 constraints over `labels`: (allowed at the start `[C]`, allowed i -> j `[C][C]`).

    `I-X` may only follow `B-X` or `I-X`; any tag may end a sentence.
    """
    parts = [split_tag(t) for t in labels]
    start = [p != "I" for p, _ in parts]
    trans = [
        [pj != "I" or (pi in "BI" and ki == kj and pi != "O") for pj, kj in parts]
        for pi, ki in parts
    ]
    return start, trans
