"""Reading and writing CoNLL column files: format quirks, schemes, errors, write-back."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from ner.corpus.reader import Corpus, check_labels, read_conll, write_conll
from ner.utils.errors import NERError

# The CoNLL-2003 layout: IOB1 tags (entities open with I-, B- only between same-type neighbours).
FOUR_COLUMNS = """-DOCSTART- -X- O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O
. . O O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- O O

BRUSSELS NNP I-NP I-LOC
1996-08-22 CD I-NP O
Paris NNP I-NP I-LOC
Berlin NNP I-NP B-LOC
"""

TWO_COLUMNS = "John B-PER\nSmith I-PER\nsaid O\n\nParis B-LOC\n.  O\n"


def write(tmp_path: Path, text: str | bytes, name: str = "data.conll") -> str:
    path = tmp_path / name
    if isinstance(text, str):
        text = text.encode("utf-8")
    path.write_bytes(text)
    return str(path)


def error(path, **kwargs) -> str:
    with pytest.raises(NERError) as exc:
        read_conll(path, **kwargs)
    message = str(exc.value)
    assert "\n" not in message
    return message


def shape(corpus: Corpus) -> list[list[tuple[list[str], list[str], list[list[str]]]]]:
    return [[(s.words, s.tags, s.columns) for s in doc.sentences] for doc in corpus.documents]


def test_four_columns_iob1_with_docstart(tmp_path):
    corpus = read_conll(write(tmp_path, FOUR_COLUMNS))
    assert corpus.scheme == "IOB1"
    assert len(corpus.documents) == 2
    assert [len(d.sentences) for d in corpus.documents] == [2, 1]
    first, second, third = corpus.sentences
    assert first.words == ["EU", "rejects", "German", "call", "."]
    assert first.tags == ["B-ORG", "O", "B-MISC", "O", "O"]
    assert first.columns[0] == ["EU", "NNP", "I-NP", "I-ORG"]
    assert [first.line, second.line, third.line] == [3, 9, 14]
    assert second.tags == ["B-PER", "I-PER"]
    assert third.tags == ["B-LOC", "O", "B-LOC", "B-LOC"]
    assert corpus.documents[0].docstart == ["-DOCSTART-", "-X-", "O", "O"]
    assert corpus.num_tokens == 11
    assert corpus.entities() == {"LOC": 3, "ORG": 1, "MISC": 1, "PER": 1}


def test_two_columns_iob2_without_docstart_is_one_document(tmp_path):
    corpus = read_conll(write(tmp_path, TWO_COLUMNS))
    assert corpus.scheme == "IOB2"
    assert len(corpus.documents) == 1
    assert corpus.documents[0].docstart is None
    assert [s.words for s in corpus.sentences] == [["John", "Smith", "said"], ["Paris", "."]]
    assert [s.tags for s in corpus.sentences] == [["B-PER", "I-PER", "O"], ["B-LOC", "O"]]
    assert [s.line for s in corpus.sentences] == [1, 5]
    assert corpus.path == str(tmp_path / "data.conll")


def test_tabs_runs_of_spaces_and_trailing_spaces(tmp_path):
    plain = read_conll(write(tmp_path, FOUR_COLUMNS, "plain"))
    messy = FOUR_COLUMNS.replace("NNP I-NP", "NNP\tI-NP").replace(" O\n", " \t O   \n")
    messy = messy.replace("rejects VBZ", "rejects \t\t VBZ")
    assert "\t" in messy and "   \n" in messy
    assert shape(read_conll(write(tmp_path, messy, "messy"))) == shape(plain)


def test_crlf_bom_blank_runs_and_no_final_newline(tmp_path):
    plain = read_conll(write(tmp_path, FOUR_COLUMNS, "plain"))
    text = FOUR_COLUMNS.rstrip("\n").replace("\n\n", "\n\n\n  \n\n")
    messy = read_conll(write(tmp_path, b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode(), "x"))
    assert shape(messy) == shape(plain)
    assert messy.documents[0].docstart == ["-DOCSTART-", "-X-", "O", "O"]
    assert [s.line for s in messy.sentences] == [6, 15, 26]  # each blank line became four
    assert messy.sentences[-1].words[-1] == "Berlin"  # the last line, without a newline


def test_leading_blank_lines_and_sentences_before_any_docstart(tmp_path):
    text = "\n\nA B-PER\n\n-DOCSTART- O\n\nB B-LOC\n"
    corpus = read_conll(write(tmp_path, text))
    assert [d.docstart for d in corpus.documents] == [None, ["-DOCSTART-", "O"]]
    assert [[s.words for s in d.sentences] for d in corpus.documents] == [[["A"]], [["B"]]]
    assert corpus.sentences[0].line == 3


def test_docstart_ends_a_sentence_without_a_blank_line(tmp_path):
    corpus = read_conll(write(tmp_path, "A O\n-DOCSTART- O\nB O\n"))
    assert [[s.words for s in d.sentences] for d in corpus.documents] == [[["A"]], [["B"]]]


def test_bioes_detected_and_converted(tmp_path):
    text = "John B-PER\nSmith E-PER\nin O\nParis S-LOC\n\nAcme B-ORG\nnew I-ORG\nCorp E-ORG\n"
    corpus = read_conll(write(tmp_path, text))
    assert corpus.scheme == "BIOES"
    assert [s.tags for s in corpus.sentences] == [
        ["B-PER", "I-PER", "O", "B-LOC"],
        ["B-ORG", "I-ORG", "I-ORG"],
    ]
    assert corpus.entities() == {"PER": 1, "LOC": 1, "ORG": 1}


def test_configured_scheme_overrides_detection(tmp_path):
    path = write(tmp_path, "a B-PER\nb I-PER\nc B-PER\n")
    assert read_conll(path).scheme == "IOB2"
    assert read_conll(path).sentences[0].tags == ["B-PER", "I-PER", "B-PER"]
    corpus = read_conll(path, scheme="IOB1")
    assert corpus.scheme == "IOB1"
    assert corpus.sentences[0].tags == ["B-PER", "I-PER", "B-PER"]
    assert read_conll(write(tmp_path, "a I-PER\n", "b"), scheme="IOB2").sentences[0].tags == [
        "B-PER"
    ]


def test_tag_column(tmp_path):
    path = write(tmp_path, "John I-PER NNP\nsaid O VBD\n")
    corpus = read_conll(path, tag_column=1)
    assert corpus.sentences[0].tags == ["B-PER", "O"]
    assert corpus.sentences[0].columns == [["John", "I-PER", "NNP"], ["said", "O", "VBD"]]
    assert error(path, tag_column=3) == (
        f"{path}:1: tag column 3 is out of range for 3 columns (0 is the word)"
    )
    assert error(path, tag_column=0) == (
        f"{path}:1: tag column 0 is out of range for 3 columns (0 is the word)"
    )


def test_without_tags_words_only(tmp_path):
    corpus = read_conll(write(tmp_path, "John\nsaid\n\n\nhello\n"), has_tags=False)
    assert corpus.scheme == "IOB2"
    assert [s.words for s in corpus.sentences] == [["John", "said"], ["hello"]]
    assert [s.tags for s in corpus.sentences] == [["O", "O"], ["O"]]
    assert corpus.sentences[0].columns == [["John"], ["said"]]


def test_without_tags_keeps_columns_and_the_file_scheme(tmp_path):
    corpus = read_conll(write(tmp_path, FOUR_COLUMNS), has_tags=False)
    assert corpus.scheme == "IOB1"  # for writing predictions back as the file has them
    assert all(t == "O" for s in corpus.sentences for t in s.tags)
    assert corpus.sentences[0].columns[0] == ["EU", "NNP", "I-NP", "I-ORG"]
    assert corpus.entities() == {}
    # a last column that is not tags: the internal scheme
    assert read_conll(write(tmp_path, "a NN\nb X-Y\n", "b"), has_tags=False).scheme == "IOB2"


def test_wrong_column_count(tmp_path):
    path = write(tmp_path, FOUR_COLUMNS.replace("call NN I-NP O", "call NN O"))
    assert error(path) == f"{path}:6: 3 columns, but the first token line (line 3) has 4"
    path = write(tmp_path, TWO_COLUMNS.replace("Paris B-LOC", "Paris NNP B-LOC"), "b")
    assert error(path) == f"{path}:5: 3 columns, but the first token line (line 1) has 2"
    path = write(tmp_path, "a O\nb\n", "c")
    assert (
        error(path, has_tags=False)
        == f"{path}:2: 1 columns, but the first token line (line 1) has 2"
    )


def test_one_column_needs_has_tags_false(tmp_path):
    path = write(tmp_path, "\nJohn\nsaid\n")
    assert error(path) == f"{path}:2: 1 column; expected a word and a tag"


@pytest.mark.parametrize(
    ("tag", "what"),
    [
        ("X-PER", "tag 'X-PER' is not O or B-/I-/E-/S- followed by a type"),
        ("B-", "tag 'B-' is not O or B-/I-/E-/S- followed by a type"),
        ("PER", "tag 'PER' is not O or B-/I-/E-/S- followed by a type"),
    ],
)
def test_malformed_tag(tmp_path, tag, what):
    path = write(tmp_path, f"a O\n\nb B-PER\nc {tag}\nd {tag}\n")
    assert error(path) == f"{path}:4: {what}"
    assert error(path, scheme="IOB2") == f"{path}:4: {what}"


def test_first_bad_tag_in_file_order_is_named(tmp_path):
    path = write(tmp_path, "a O\nb B-\nc X-PER\n")
    assert error(path) == f"{path}:2: tag 'B-' is not O or B-/I-/E-/S- followed by a type"


@pytest.mark.parametrize("scheme", ["IOB1", "IOB2"])
def test_bioes_tag_in_an_iob_file(tmp_path, scheme):
    path = write(tmp_path, "a B-PER\nb I-PER\nc E-PER\n")
    assert error(path, scheme=scheme) == f"{path}:3: tag 'E-PER' is not in the {scheme} scheme"


def test_not_utf8(tmp_path):
    path = write(tmp_path, b"a O\n\nb O\ncaf\xe9 O\n")
    assert error(path) == f"{path}:4: not UTF-8 text (byte 0xe9)"
    path = write(tmp_path, b"\xff\xfea\x00 \x00O\x00\n\x00", "utf16")
    assert error(path) == f"{path}:1: not UTF-8 text (byte 0xff)"


@pytest.mark.parametrize("text", ["", "\n\n \r\n", "-DOCSTART- -X- O O\n\n", "\ufeff"])
def test_empty_corpus(tmp_path, text):
    path = write(tmp_path, text)
    assert error(path) == f"{path}: no sentences"
    assert error(path, has_tags=False) == f"{path}: no sentences"


def test_missing_file_and_directory(tmp_path):
    path = str(tmp_path / "nope.conll")
    assert error(path) == f"{path}: no such file"
    assert error(str(tmp_path)) == f"{tmp_path}: is a directory, not a file"


def test_unknown_scheme(tmp_path):
    path = write(tmp_path, TWO_COLUMNS)
    assert (
        error(path, scheme="BIO") == "scheme: must be auto or one of IOB1, IOB2, BIOES, not 'BIO'"
    )


def test_check_labels(tmp_path):
    labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    check_labels(read_conll(write(tmp_path, TWO_COLUMNS)), labels)
    path = write(tmp_path, "a B-PER\n\nb O\nc B-FOO\nd I-FOO\n", "eng.testa")
    with pytest.raises(NERError) as exc:
        check_labels(read_conll(path), labels)
    assert str(exc.value) == (
        f"{path}:4: tag 'B-FOO' is not in the training label set [O, B-LOC, I-LOC, B-PER, I-PER]"
    )


def tag_column(text: str) -> list[str]:
    """The last column of each non-blank line (the predicted tag in write_conll's output)."""
    return [line.split()[-1] for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "text",
    [
        FOUR_COLUMNS,
        TWO_COLUMNS,
        "John B-PER\nSmith E-PER\nin O\nParis S-LOC\n\nAcme B-ORG\nnew I-ORG\nCorp E-ORG\n",
    ],
)
def test_write_round_trip_in_the_input_scheme(tmp_path, text):
    corpus = read_conll(write(tmp_path, text))
    out = tmp_path / "out.conll"
    write_conll(out, corpus, [s.tags for s in corpus.sentences], corpus.scheme)
    written = out.read_text(encoding="utf-8")
    assert tag_column(written) == tag_column(text)
    # every original column is kept, the prediction appended
    lines = [ln for ln in written.splitlines() if ln.strip()]
    originals = [ln for ln in text.splitlines() if ln.strip()]
    assert [ln.rsplit(" ", 1)[0].split() for ln in lines] == [ln.split() for ln in originals]
    again = read_conll(out)
    assert again.scheme == corpus.scheme
    assert [s.tags for s in again.sentences] == [s.tags for s in corpus.sentences]
    assert [d.docstart for d in again.documents] == [
        d.docstart and [*d.docstart, "O"] for d in corpus.documents
    ]


def test_write_layout_and_other_scheme(tmp_path):
    corpus = read_conll(write(tmp_path, FOUR_COLUMNS))
    out = io.StringIO()
    write_conll(out, corpus, [s.tags for s in corpus.sentences], "BIOES")
    assert out.getvalue().splitlines()[:10] == [
        "-DOCSTART- -X- O O O",
        "",
        "EU NNP I-NP I-ORG S-ORG",
        "rejects VBZ I-VP O O",
        "German JJ I-NP I-MISC S-MISC",
        "call NN I-NP O O",
        ". . O O O",
        "",
        "Peter NNP I-NP I-PER B-PER",
        "Blackburn NNP I-NP I-PER E-PER",
    ]


def test_write_sentences_without_documents(tmp_path):
    corpus = read_conll(write(tmp_path, "John\nsaid\n\nhello\n"), has_tags=False)
    out = io.StringIO()
    write_conll(out, corpus.sentences, [["B-PER", "O"], ["O"]], "IOB1")
    assert out.getvalue() == "John I-PER\nsaid O\n\nhello O\n\n"


def test_write_is_atomic(tmp_path):
    corpus = read_conll(write(tmp_path, TWO_COLUMNS))
    out = tmp_path / "out.conll"
    out.write_text("old\n", encoding="utf-8")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ValueError, match="1 tags for 2 words"):
        write_conll(out, corpus, [["B-PER", "I-PER", "O"], ["O"]], "IOB2")
    assert out.read_text(encoding="utf-8") == "old\n"
    assert sorted(os.listdir(tmp_path)) == before  # no temporary file left behind
    with pytest.raises(ValueError, match="1 predictions for 2 sentences"):
        write_conll(out, corpus, [["O", "O", "O"]], "IOB2")
    write_conll(out, corpus, [s.tags for s in corpus.sentences], "IOB2")
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_write_errors(tmp_path):
    corpus = read_conll(write(tmp_path, TWO_COLUMNS))
    tags = [s.tags for s in corpus.sentences]
    with pytest.raises(NERError) as exc:
        write_conll(tmp_path / "x", corpus, tags, "BIO")
    assert str(exc.value) == "scheme: must be one of IOB1, IOB2, BIOES, not 'BIO'"
    with pytest.raises(NERError) as exc:
        write_conll(tmp_path / "no" / "x", corpus, tags, "IOB2")
    assert str(exc.value) == f"{tmp_path / 'no'}: output directory does not exist"


def test_only_spaces_and_tabs_separate_columns(tmp_path):
    text = "New\u00a0York B-LOC\nTokyo\u3000Tower B-LOC\nx\u200by O\n"
    corpus = read_conll(write(tmp_path, text))
    assert corpus.sentences[0].words == ["New\u00a0York", "Tokyo\u3000Tower", "x\u200by"]
