"""The span files annotation tools export (ner tag's JSONL, spaCy/Prodigy, doccano, Label Studio)
read as training data: CoNLL sentences written as each format and read back give the same
words and tags; hand-written files in each tool's documented shape; detection and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_ner, tiny_sentences
from round_trip import accept_predictions

from ner.corpus.inputs import Passage
from ner.corpus.outputs import write_predictions
from ner.corpus.span_corpus import CorpusFormat, read_corpus, read_spans
from ner.data.datamodule import NERDataModule
from ner.utils.errors import NERError

FORMATS = ("jsonl", "spacy", "doccano", "label-studio")  # as `ner tag --format` names them
READ_AS = {"jsonl": "jsonl-ner", "spacy": "spacy", "doccano": "doccano",
           "label-studio": "label-studio"}  # fmt: skip

# (word, IOB2 tag) and the separator after each word: an emoji outside the BMP (before, inside
# and after entities) and tabs, which the writers keep in the text and the reader splits at
HAND = [
    ([("😀", "O"), ("John", "B-PER"), ("Smith", "I-PER"), ("visited", "O"), ("Zürich", "B-LOC"),
      (".", "O")], [" ", " ", "\t", " ", " "]),
    ([("Acme", "B-ORG"), ("🚀", "I-ORG"), ("Corp", "I-ORG"), ("met", "O"), ("Paris", "B-LOC"),
      ("London", "B-LOC"), ("👍", "O")], ["\t", " ", "  ", " ", " ", " "]),
    ([("the", "O"), ("UN", "B-ORG")], ["\t\t"]),
]  # fmt: skip


def sentences_with_text() -> list[tuple[list[tuple[str, str]], str]]:
    """Each sentence and its text: the tiny corpus joined with single spaces, and HAND."""
    out = [(s, " ".join(w for w, _ in s)) for s in tiny_sentences(40, seed=5)]
    for sentence, seps in HAND:
        words = [w for w, _ in sentence]
        out.append((sentence, "".join(w + s for w, s in zip(words, [*seps, ""], strict=True))))
    return out


def passage(line: int, words: list[str], text: str) -> Passage:
    """A passage whose offsets the test finds itself: each word where it next occurs."""
    offsets, pos = [], 0
    for word in words:
        start = text.index(word, pos)
        offsets.append((start, start + len(word)))
        pos = start + len(word)
    return Passage(line, text, words, offsets)


def write_format(path: Path, fmt: str, data) -> Path:
    passages = [passage(i, [w for w, _ in s], text) for i, (s, text) in enumerate(data, 1)]
    tagged = [([t for _, t in s], [1.0] * len(s)) for s, _ in data]
    assert write_predictions(passages, tagged, fmt, str(path)) == len(data)
    if fmt == "label-studio":
        accept_predictions(path)
    return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_round_trips_words_and_tags(tmp_path, fmt):
    data = sentences_with_text()
    path = write_format(tmp_path / f"train.{fmt}", fmt, data)
    corpus, report = read_spans(str(path))  # the format detected from the content
    assert report.format == READ_AS[fmt] == corpus.format
    assert [(s.words, s.tags) for s in corpus.sentences] == [
        ([w for w, _ in s], [t for _, t in s]) for s, _ in data
    ]
    assert report.tally.problems == [] and report.tally.spans == sum(
        t.startswith("B-") for s, _ in data for _, t in s
    )
    # each record a document of one sentence, at its own line (a task's line for Label Studio)
    assert corpus.doc_ids == list(range(len(data)))
    assert corpus.scheme == "IOB2" and not corpus.has_docstart
    lines = [s.line for s in corpus.sentences]
    assert lines == sorted(set(lines)) and len(lines) == len(data)
    if fmt != "label-studio":
        assert lines == list(range(1, len(data) + 1))


def test_a_span_file_trains_through_the_data_module(tmp_path, tiny_model_dir):
    data = sentences_with_text()
    train = write_format(tmp_path / "train.jsonl", "spacy", data)
    val = write_format(tmp_path / "export.json", "label-studio", data[:10])
    dm = NERDataModule(train_file=str(train), val_file=str(val), tokenizer=str(tiny_model_dir),
                       batch_size=4)  # fmt: skip
    assert dm.labels == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert dm.scheme_of_train == "IOB2"
    dm.setup("fit")
    assert dm.sentences("val") == [([w for w, _ in s], [t for _, t in s]) for s, _ in data[:10]]
    batch = next(iter(dm.train_dataloader()))
    assert batch["labels"].shape[0] == 4


HAND_WRITTEN = {
    # the shapes of each tool's documentation, offsets counted by hand
    "doccano": '{"id": 3, "text": "Mary met John Smith.", "label": [[0, 4, "PER"], '
    '[9, 19, "PER"]], "Comments": []}\n',
    "spacy": '{"text": "Mary met John Smith.", "spans": [{"start": 0, "end": 4, "label": "PER",'
    ' "token_start": 0, "token_end": 0}, {"start": 9, "end": 19, "label": "PER"}],'
    ' "answer": "accept"}\n{"text": "Mary met", "spans": [], "answer": "reject"}\n',
    "label-studio": json.dumps([
        {"id": 7, "data": {"text": "Mary met John Smith."}, "annotations": [
            {"id": 1, "was_cancelled": True, "result": []},
            {"id": 2, "was_cancelled": False, "result": [
                {"id": "a", "from_name": "label", "to_name": "text", "type": "labels",
                 "value": {"start": 0, "end": 4, "text": "Mary", "labels": ["PER"]}},
                {"id": "b", "from_name": "label", "to_name": "text", "type": "labels",
                 "value": {"start": 9, "end": 19, "text": "John Smith", "labels": ["PER"]}},
                {"id": "c", "from_name": "sentiment", "to_name": "text", "type": "choices",
                 "value": {"choices": ["Positive"]}}]}]},
        {"id": 8, "data": {"text": "Mary met"}, "annotations": [],
         "predictions": [{"result": [{"from_name": "label", "to_name": "text",
                                      "type": "labels", "value": {"start": 0, "end": 4,
                                                                  "labels": ["PER"]}}]}]},
    ], indent=2),
    "jsonl-ner": '{"line": 1, "text": "Mary met John Smith.", "entities": [{"text": "Mary",'
    ' "label": "PER", "start": 0, "end": 4, "score": 0.9}, {"text": "John Smith", "label": "PER",'
    ' "start": 9, "end": 19, "score": 0.8}]}\n{"line": 2, "text": "   ", "entities": []}\n',
}  # fmt: skip


@pytest.mark.parametrize("fmt", sorted(HAND_WRITTEN))
def test_hand_written_files_of_each_tool(tmp_path, fmt, capsys):
    path = tmp_path / "data.txt"  # no telling extension: the content decides
    path.write_text(HAND_WRITTEN[fmt], encoding="utf-8")
    corpus = read_corpus(path)
    assert [(s.words, s.tags) for s in corpus.sentences] == [
        (["Mary", "met", "John", "Smith", "."], ["B-PER", "O", "B-PER", "I-PER", "O"])
    ]
    left_out = {"spacy": "1 of 2 records left out (1 not accepted)",
                "label-studio": "1 of 2 records left out (1 without an annotation)",
                "jsonl-ner": "1 of 2 records left out (1 without words)"}  # fmt: skip
    err = capsys.readouterr().err
    assert err == (f"{path}: {left_out[fmt]}\n" if fmt in left_out else "")


def test_conll_that_opens_with_a_bracket_stays_conll(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("[ O\nJohn B-PER\n] O\n\n{ O\nParis B-LOC\n", encoding="utf-8")
    corpus = read_corpus(path)
    assert corpus.format == "conll" and corpus.sentences[0].words == ["[", "John", "]"]


def test_format_named_or_detected(tmp_path):
    path = write_format(tmp_path / "a.jsonl", "doccano", sentences_with_text()[:3])
    assert read_corpus(path, CorpusFormat(format="doccano")).format == "doccano"
    with pytest.raises(NERError) as err:
        read_corpus(path, CorpusFormat(format="spacy"))
    assert str(err.value) == f'{path}:1: no "spans" in this record, where spacy keeps its spans'
    with pytest.raises(NERError, match=r"^data\.format: must be one of auto, conll, jsonl-ner, "
                       r"spacy, doccano, label-studio, not 'prodigy'$"):  # fmt: skip
        CorpusFormat(format="prodigy")
    with pytest.raises(NERError, match=r"^data\.misaligned: must be one of refuse, expand, drop"):
        NERDataModule(train_file=str(path), misaligned="shift")


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"text": "a", "spans": []}\n{"text": "b", "spans": [}\n',
         "x.jsonl:2: not JSON: Expecting value (column 25)"),
        ('{"text": "a", "tokens": []}\n', 'x.jsonl:1: a JSON record without "entities", "spans",'
         ' "label": not a span format ner reads'),
        ('{"spans": []}\n', 'x.jsonl:1: no "text" (a string) in this record'),
        ('{"text": "a b", "spans": [{"start": 0, "end": 1.5, "label": "X"}]}\n',
         "x.jsonl:1: span end 1.5 is not an integer offset"),
        ('{"text": "a b", "spans": [{"start": 0, "end": 1, "label": "Big Cat"}]}\n',
         "x.jsonl:1: label 'Big Cat' is not a word without spaces"),
        ('{"text": "a b", "label": ["positive"]}\n',
         "x.jsonl:1: a doccano label is [start, end, label], not 'positive'"),
        ('[\n  {"id": 4, "data": {"text": "a"}},\n  {"id": 5, "data": {"sentence": "b"}}\n]',
         "x.jsonl:3: task 5: no \"text\" (a string) in this record"),
        ('[\n  {"data": {"text": "a"}}\n  {"data": {"text": "b"}}\n]',
         'x.jsonl:3: not JSON: expected "," or "]" after a task'),
        ("[1, 2]", 'x.jsonl:1: a JSON list, but not of Label Studio tasks (no "data"; Label'
         ' Studio\'s "JSON" export has it, "JSON-MIN" not)'),
        ('[{"id": 1, "data": {"text": "a"}, "predictions": []}]',
         "x.jsonl: no record with words to train on (1 records: 1 without an annotation)"),
        ('{"text": "a b", "tokens": [{"text": "a", "start": 0, "end": 1}, {"text": "c", "start":'
         ' 2, "end": 3}], "spans": []}\n',
         "x.jsonl:1: token 1 [2, 3) says 'c', the text holds 'b'"),
        ('{"text": "a b", "tokens": [{"text": "a b", "start": 0, "end": 3}, {"text": "b", "start":'
         ' 2, "end": 3}], "spans": []}\n', "x.jsonl:1: token 1 [2, 3) overlaps the token before"),
        ('{"text": "a b", "tokens": {"a": 1}, "spans": []}\n', 'x.jsonl:1: "tokens" is not a list'),
        ('{"text": "a b", "words": ["a", "c"], "entities": []}\n',
         "x.jsonl:1: word 1 'c' is not where the text goes on ('b')"),
        ('{"text": "a b c", "words": ["a", "b"], "entities": []}\n',
         "x.jsonl:1: the words end before the text does (' c' is left)"),
    ],
)  # fmt: skip
def test_one_line_errors(tmp_path, text, message, capsys):
    path = tmp_path / "x.jsonl"
    path.write_text(text, encoding="utf-8")
    code, _, err = run_ner(["inspect", str(path)], capsys)
    assert code == 2 and err == f"error: {tmp_path}/{message}\n"


def test_unknown_label_in_a_span_file_names_its_record(tmp_path):
    data = sentences_with_text()[:5]
    train = write_format(tmp_path / "train.jsonl", "spacy", data)
    val = tmp_path / "val.jsonl"
    val.write_text('{"text": "a b", "spans": []}\n{"text": "Cheese", "spans": [{"start": 0,'
                   ' "end": 6, "label": "FOOD"}]}\n', encoding="utf-8")  # fmt: skip
    dm = NERDataModule(train_file=str(train), val_file=str(val))
    with pytest.raises(NERError, match=r"val\.jsonl:2: tag 'B-FOOD' is not in the training"):
        dm.splits.check_labels("val", dm.labels)


def test_given_words_are_the_words(tmp_path):
    # spaCy splits "Jean-Luc" at its hyphen and keeps a token of the extra space; ner tag's
    # JSONL keeps "oOo-----" whole: each file's words, not the splitter's
    spacy = {"text": "Mary  met Jean-Luc", "spans": [{"start": 10, "end": 18, "label": "PER"}],
             "tokens": [{"text": t, "start": s, "end": e} for t, s, e in [
                 ("Mary", 0, 4), (" ", 5, 6), ("met", 6, 9), ("Jean", 10, 14), ("-", 14, 15),
                 ("Luc", 15, 18)]]}  # fmt: skip
    ours = {"text": "oOo----- Acme", "words": ["oOo-----", "Acme"],
            "entities": [{"start": 9, "end": 13, "label": "ORG"}]}  # fmt: skip
    for name, record, expected in [
        ("a.jsonl", spacy, (["Mary", "met", "Jean", "-", "Luc"],
                            ["O", "O", "B-PER", "I-PER", "I-PER"])),
        ("b.jsonl", ours, (["oOo-----", "Acme"], ["O", "B-ORG"])),
    ]:  # fmt: skip
        path = tmp_path / name
        path.write_text(json.dumps(record) + "\n", encoding="utf-8")
        corpus = read_corpus(path)
        assert [(s.words, s.tags) for s in corpus.sentences] == [expected]


def test_writers_give_the_words_where_the_text_does_not(tmp_path):
    # CoNLL input's words, joined with spaces: "oOo-----" would split, "Acme Corp" would not
    conll = [Passage(1, "oOo----- Acme", ["oOo-----", "Acme"], [(0, 8), (9, 13)]),
             Passage(2, "Acme Corp", ["Acme", "Corp"], [(0, 4), (5, 9)])]  # fmt: skip
    tagged = [(["O", "B-ORG"], [1.0, 1.0]), (["B-ORG", "I-ORG"], [1.0, 1.0])]
    write_predictions(conll, tagged, "jsonl", str(tmp_path / "a.jsonl"))
    records = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert records[0]["words"] == ["oOo-----", "Acme"] and "words" not in records[1]
    write_predictions(conll, tagged, "spacy", str(tmp_path / "b.jsonl"))
    first = json.loads((tmp_path / "b.jsonl").read_text().splitlines()[0])
    assert first["tokens"] == [
        {"text": "oOo-----", "start": 0, "end": 8, "id": 0, "ws": True},
        {"text": "Acme", "start": 9, "end": 13, "id": 1, "ws": False},
    ]
    assert first["spans"] == [{"start": 9, "end": 13, "token_start": 1, "token_end": 1,
                               "label": "ORG", "text": "Acme"}]  # fmt: skip
