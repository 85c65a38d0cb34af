"""Misaligned spans said plainly: a file with planted ones (inside-word start and end, overlap,
empty, out of range, no word, a text that is not the offsets', UTF-16 offsets after an emoji)
has exact counts in `ner inspect`, is refused by the data module and `ner fit` with one line,
and each policy changes exactly the spans it says."""

from __future__ import annotations

import json

import pytest
from helpers import one_line_error, run_ner

from ner.corpus.span_corpus import CorpusFormat, read_corpus
from ner.data.datamodule import NERDataModule
from ner.utils.errors import NERError


def record(text: str, *spans) -> str:
    keys = ("start", "end", "label", "text")
    spans = [dict(zip(keys[: len(s)], s, strict=True)) for s in spans]
    return json.dumps({"text": text, "spans": spans}, ensure_ascii=False)


# "😀 Mary met Reuters": code points Mary [2, 6), Reuters [11, 18); UTF-16 units one more each
PLANTED = [
    record("John Smith visited Paris", (0, 10, "PER"), (19, 24, "LOC")),  # aligned
    record("Mary works at Acme Corp", (1, 4, "PER"), (14, 23, "ORG")),  # start inside "Mary"
    record("Berlin is big", (0, 3, "LOC"), (6, 7, "LOC")),  # ends inside "Berlin"; a space
    record("John Smith met Mary", (0, 10, "PER"), (5, 10, "PER"), (15, 15, "PER"),
           (15, 40, "PER")),  # overlap, empty, out of range
    record("😀 Mary met Reuters", (3, 7, "PER"), (12, 19, "ORG")),  # UTF-16, no text: assumed
    record("😀 Mary met John", (3, 7, "PER", "Mary"), (12, 16, "PER", "Jane")),  # by text
]  # fmt: skip
KINDS = {"outside": 2, "text": 1, "no word": 1, "overlap": 1, "empty": 1, "start": 2, "end": 1}
FIRST = 'span [1, 4) "ary" starts inside the word "Mary"'


@pytest.fixture
def planted(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(PLANTED) + "\n", encoding="utf-8")
    return path


def test_inspect_counts_and_lists_each(planted, capsys):
    code, out, _ = run_ner(["inspect", "--json", str(planted)], capsys)
    stats = json.loads(out)
    assert code == 0
    assert stats["spans"] == 14 and stats["misaligned"] == KINDS
    assert [(p["line"], p["kind"]) for p in stats["misaligned_spans"]] == [
        (2, "start"), (3, "end"), (3, "no word"), (4, "overlap"), (4, "empty"), (4, "outside"),
        (5, "start"), (5, "outside"), (6, "text"),
    ]  # fmt: skip
    assert [p["message"] for p in stats["misaligned_spans"]][3:] == [
        'span [5, 10) "Smith" overlaps the span [0, 10) "John Smith" before it',
        "span [15, 15) is empty",
        "span [15, 40) lies outside its text (19 characters)",
        'span [3, 7) "ary " starts inside the word "Mary"',
        "span [12, 19) lies outside its text (18 characters, 19 UTF-16 units)",
        'span [12, 16) says "Jane", but its offsets cover "John"',
    ]
    assert stats["spans_read_as_assumed"] == 2 and stats["offsets_assumed"] == "codepoints"
    assert stats["spans_read_as_utf16_by_their_text"] == 1
    assert stats["entities"] == {"LOC": 1, "ORG": 1, "PER": 3}  # the 4 aligned spans, and Mary

    code, out, _ = run_ner(["inspect", str(planted)], capsys)
    assert "  misaligned spans  9 (empty 1, outside 2, text 1, no word 1, overlap 1, start 2, " \
           "end 1): left out of the counts above" in out  # fmt: skip
    assert "2 spans without text after a character outside the BMP: offsets read as code " \
           "points (--offsets utf16 to read UTF-16 units)" in out  # fmt: skip
    assert f"    line 2: {FIRST}\n" in out and out.count("\n    line ") == 9


def test_training_refuses_the_file_with_one_line(planted, capsys, tiny_model_dir):
    expected = (f"{planted}:2: {FIRST} (9 misaligned spans in all; --data.misaligned "
                "expand|drop to change them)")  # fmt: skip
    with pytest.raises(NERError) as err:
        NERDataModule(train_file=str(planted)).labels  # noqa: B018
    assert str(err.value) == expected
    code, _, err_text = run_ner(
        ["fit", "--model.encoder", str(tiny_model_dir), "--data.train_file", str(planted),
         "--data.val_file", str(planted), "--trainer.max_steps", "1"], capsys,
    )  # fmt: skip
    assert one_line_error(code, err_text) == f"error: {expected}"


@pytest.mark.parametrize(
    "policy, offsets, widened, dropped, entities",
    [
        ("expand", "codepoints", 3, 6, {"LOC": 2, "ORG": 1, "PER": 5}),
        ("drop", "codepoints", 0, 9, {"LOC": 1, "ORG": 1, "PER": 3}),
        ("drop", "utf16", 0, 7, {"LOC": 1, "ORG": 2, "PER": 4}),
    ],
)
def test_each_policy_changes_exactly_the_spans_it_says(
    planted, capsys, policy, offsets, widened, dropped, entities
):
    dm = NERDataModule(train_file=str(planted), misaligned=policy, offsets=offsets)
    corpus = dm.corpus("train")
    assert dict(corpus.entities()) == entities
    unit = "code points (--data.offsets utf16 to read UTF-16 units)" if offsets == "codepoints" \
        else "UTF-16 units (as --data.offsets utf16 says)"  # fmt: skip
    assert capsys.readouterr().err.splitlines() == [
        f"{planted}: {widened + dropped} misaligned spans: {widened} widened to the words they "
        f"touch, {dropped} left out (--data.misaligned {policy})",
        f"{planted}: 2 spans without text after a character outside the BMP: offsets read as "
        f"{unit}",
        f"{planted}: 1 span read in UTF-16 units, as its own text says",
    ]
    if policy == "expand":  # widened to whole words, nothing shifted: "ary" is "Mary"
        assert corpus.sentences[1].tags[:1] == ["B-PER"]
        assert corpus.sentences[2].tags == ["B-LOC", "O", "O"]


def test_utf16_offsets_with_their_text_need_no_option(tmp_path):
    # Label Studio before its emoji fix: UTF-16 units, and the text, which settles the reading
    tasks = [{"id": 1, "data": {"text": "👍 Mary met Reuters"}, "annotations": [{"result": [
        {"type": "labels", "value": {"start": 3, "end": 7, "text": "Mary", "labels": ["PER"]}},
        {"type": "labels", "value": {"start": 12, "end": 19, "text": "Reuters",
                                      "labels": ["ORG"]}}]}]}]  # fmt: skip
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tasks, ensure_ascii=False), encoding="utf-8")
    corpus = read_corpus(path, CorpusFormat(), note=lambda _: None)
    assert corpus.sentences[0].tags == ["O", "B-PER", "O", "B-ORG"]


def test_label_studio_messages_name_the_task(tmp_path):
    tasks = [{"id": 1, "data": {"text": "Mary met Reuters"}, "annotations": []},
             {"id": 42, "data": {"text": "Mary met Reuters"}, "annotations": [{"result": [
                 {"type": "labels", "value": {"start": 0, "end": 2, "labels": ["PER"]}},
                 {"type": "labels", "value": {"start": 9, "end": 16,
                                              "labels": ["ORG", "LOC"]}}]}]}]  # fmt: skip
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tasks, indent=1), encoding="utf-8")
    opens = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line == " {"]
    with pytest.raises(NERError) as err:
        read_corpus(path)
    # the line where task 42 opens; its result of two labels is two spans (the second overlaps)
    assert str(err.value) == (f'{path}:{opens[1]}: task 42: span [0, 2) "Ma" ends inside the'
                              ' word "Mary" (2 misaligned spans in all; --data.misaligned'
                              " expand|drop to change them)")  # fmt: skip
