"""Tagging schemes: tag checks, detection, conversions (round trips), allowed transitions."""

from __future__ import annotations

import random

import pytest

from ner.corpus import schemes

TYPES = ["LOC", "MISC", "PER"]


def random_iob2(rng: random.Random, n: int) -> list[str]:
    """A valid IOB2 sequence of `n` tags, adjacent entities of one type included."""
    tags: list[str] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.4:
            tags.append("O")
        elif r < 0.7 or not tags or tags[-1] == "O":
            tags.append("B-" + rng.choice(TYPES))
        else:
            tags.append("I-" + tags[-1][2:])
    return tags


_RNG = random.Random(0)
SEQUENCES = [random_iob2(_RNG, _RNG.randint(1, 30)) for _ in range(300)]


def spans(iob2: list[str]) -> list[tuple[int, int, str]]:
    """Entity spans (start, end, type) of a valid IOB2 sequence."""
    out = []
    for i, tag in enumerate(iob2):
        if tag.startswith("B-"):
            end = i + 1
            while end < len(iob2) and iob2[end] == "I-" + tag[2:]:
                end += 1
            out.append((i, end, tag[2:]))
    return out


def test_split_tag():
    assert schemes.split_tag("O") == ("O", "")
    assert schemes.split_tag("B-PER") == ("B", "PER")
    assert schemes.split_tag("S-B-X") == ("S", "B-X")
    for bad in ["X-PER", "B-", "B", "", "o", "BPER"]:
        with pytest.raises(ValueError, match="is not O or B-/I-/E-/S- followed by a type"):
            schemes.split_tag(bad)


def test_check_tag():
    schemes.check_tag("E-PER", "BIOES")
    schemes.check_tag("I-PER", "IOB1")
    with pytest.raises(ValueError) as exc:
        schemes.check_tag("E-PER", "IOB1")
    assert str(exc.value) == "tag 'E-PER' is not in the IOB1 scheme"
    with pytest.raises(ValueError) as exc:
        schemes.check_tag("S-LOC", "IOB2")
    assert str(exc.value) == "tag 'S-LOC' is not in the IOB2 scheme"


def test_detect_scheme():
    assert schemes.detect_scheme([["B-PER", "I-PER", "O"], ["B-LOC"]]) == "IOB2"
    assert schemes.detect_scheme([["O", "I-PER", "I-PER"], ["B-LOC"]]) == "IOB1"
    assert schemes.detect_scheme([["B-PER", "I-LOC"]]) == "IOB1"  # I- opening another type
    assert schemes.detect_scheme([["I-PER"]]) == "IOB1"
    assert schemes.detect_scheme([["B-PER", "E-PER"], ["I-LOC"]]) == "BIOES"
    assert schemes.detect_scheme([["S-PER"]]) == "BIOES"
    assert schemes.detect_scheme([["O", "O"], []]) == "IOB2"  # nothing to tell: IOB2
    assert schemes.detect_scheme([]) == "IOB2"


def test_detect_scheme_of_converted_sequences():
    with_entities = [s for s in SEQUENCES if any(t != "O" for t in s)]
    assert schemes.detect_scheme(with_entities) == "IOB2"
    assert schemes.detect_scheme([schemes.from_iob2(s, "IOB1") for s in with_entities]) == "IOB1"
    assert schemes.detect_scheme([schemes.from_iob2(s, "BIOES") for s in with_entities]) == "BIOES"


def test_conversions_by_example():
    iob2 = ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG", "I-ORG", "I-ORG"]
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "I-ORG", "I-ORG"]
    bioes = ["B-PER", "E-PER", "S-PER", "O", "S-LOC", "B-ORG", "I-ORG", "E-ORG"]
    assert schemes.from_iob2(iob2, "IOB1") == iob1
    assert schemes.from_iob2(iob2, "BIOES") == bioes
    assert schemes.from_iob2(iob2, "IOB2") == iob2
    assert schemes.to_iob2(iob1, "IOB1") == iob2
    assert schemes.to_iob2(bioes, "BIOES") == iob2
    assert schemes.to_iob2(iob2, "IOB2") == iob2
    # an I- that opens an entity in an IOB2 file is read as B-, as conlleval does
    assert schemes.to_iob2(["O", "I-PER", "I-PER", "I-LOC"], "IOB2") == [
        "O",
        "B-PER",
        "I-PER",
        "B-LOC",
    ]


@pytest.mark.parametrize("scheme", schemes.SCHEMES)
def test_round_trip_through_iob2(scheme):
    for iob2 in SEQUENCES:
        other = schemes.from_iob2(iob2, scheme)
        assert len(other) == len(iob2)
        for tag in other:
            schemes.check_tag(tag, scheme)
        assert schemes.to_iob2(other, scheme) == iob2
        # and back again from the other scheme's side
        assert schemes.from_iob2(schemes.to_iob2(other, scheme), scheme) == other


@pytest.mark.parametrize("source", schemes.SCHEMES)
@pytest.mark.parametrize("target", schemes.SCHEMES)
def test_cross_scheme_conversion_keeps_spans(source, target):
    for iob2 in SEQUENCES:
        converted = schemes.from_iob2(
            schemes.to_iob2(schemes.from_iob2(iob2, source), source), target
        )
        assert spans(schemes.to_iob2(converted, target)) == spans(iob2)


def test_iob1_uses_b_only_between_same_type_entities():
    for iob2 in SEQUENCES:
        iob1 = schemes.from_iob2(iob2, "IOB1")
        for i, tag in enumerate(iob1):
            if tag.startswith("B-"):
                assert i > 0 and iob2[i - 1][2:] == tag[2:] and iob2[i] == tag


def test_entity_types_and_label_list():
    assert schemes.entity_types(["O", "B-PER", "I-PER", "S-LOC"]) == {"PER", "LOC"}
    assert schemes.label_list(["PER", "LOC", "PER"]) == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert schemes.label_list([]) == ["O"]


def test_allowed_transitions():
    labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    start, trans = schemes.allowed_transitions(labels)
    assert start == [True, True, False, True, False]
    allowed = {(labels[i], labels[j]) for i in range(5) for j in range(5) if trans[i][j]}
    inside = {("B-LOC", "I-LOC"), ("I-LOC", "I-LOC"), ("B-PER", "I-PER"), ("I-PER", "I-PER")}
    to_outside_or_begin = {(a, b) for a in labels for b in ("O", "B-LOC", "B-PER")}
    assert allowed == inside | to_outside_or_begin


def test_allowed_transitions_accept_every_valid_sequence():
    labels = schemes.label_list(TYPES)
    index = {t: i for i, t in enumerate(labels)}
    start, trans = schemes.allowed_transitions(labels)
    for iob2 in SEQUENCES:
        ids = [index[t] for t in iob2]
        assert start[ids[0]]
        assert all(trans[a][b] for a, b in zip(ids[:-1], ids[1:], strict=True))
    # and reject an I- after O or after another type
    assert not trans[index["O"]][index["I-PER"]]
    assert not trans[index["B-LOC"]][index["I-PER"]]


def test_malformed_bioes_is_repaired_like_conlleval():
    # Regression: an E- that opens an entity, and I- after an entity closed by E-, start entities.
    from ner.corpus.schemes import to_iob2

    assert to_iob2(["O", "E-PER"], "BIOES") == ["O", "B-PER"]
    assert to_iob2(["B-PER", "E-PER", "I-PER", "E-PER"], "BIOES") == [
        "B-PER", "I-PER", "B-PER", "I-PER",
    ]  # fmt: skip
    assert to_iob2(["S-LOC", "I-LOC"], "BIOES") == ["B-LOC", "B-LOC"]


def test_is_valid_iob2():
    from ner.corpus.schemes import is_valid_iob2

    assert is_valid_iob2(["B-PER", "I-PER", "O", "B-LOC"])
    assert is_valid_iob2([])
    assert not is_valid_iob2(["I-PER"])
    assert not is_valid_iob2(["O", "I-PER"])
    assert not is_valid_iob2(["B-LOC", "I-PER"])
