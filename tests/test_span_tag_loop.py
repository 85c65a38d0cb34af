"""The annotation loop: `ner tag` writes pre-annotations in each tool's format, and the file read
back as training data gives the very tags `ner tag` wrote (its CoNLL output, the independent
answer), text with emoji and tabs included."""

from __future__ import annotations

import json

import pytest
from helpers import TAG_LINES, run_ner

from ner.corpus.span_corpus import read_spans

LINES = [*TAG_LINES, "😀 John Smith\tvisited Paris 👍", "Acme\tCorp met Mary 🚀 in Berlin"]


def conll_blocks(text: str) -> list[tuple[list[str], list[str]]]:
    """(words, tags) of each non-empty block of `ner tag --format conll` output."""
    blocks = [b for b in text.split("\n\n") if b.strip()]
    rows = [[line.rsplit(" ", 1) for line in b.strip("\n").split("\n")] for b in blocks]
    return [([w for w, _ in r], [t for _, t in r]) for r in rows]


@pytest.fixture(scope="module")
def tagged_files(trained, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loop")
    source = tmp / "input.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    ckpt = str(trained["ckpt"] / "best.ckpt")
    out = {}
    for fmt in ("conll", "jsonl", "spacy", "doccano", "label-studio"):
        out[fmt] = tmp / f"out.{fmt}"
        code = run_ner(["tag", ckpt, str(source), "--format", fmt, "--output", str(out[fmt])],
                       _Quiet())[0]  # fmt: skip
        assert code == 0
    return out, ckpt


class _Quiet:
    """A stand-in for capsys in a module fixture: `run_ner` only reads its output."""

    def readouterr(self):
        return "", ""


@pytest.mark.parametrize("fmt", ["jsonl", "spacy", "doccano", "label-studio"])
def test_tag_output_reads_back_as_the_tags_it_wrote(tagged_files, fmt):
    files, _ = tagged_files
    expected = conll_blocks(files["conll"].read_text(encoding="utf-8"))
    assert sum(t.startswith("B-") for _, tags in expected for t in tags) >= 5  # a real test
    if fmt == "label-studio":  # accepted in the tool: predictions become the annotations
        tasks = json.loads(files[fmt].read_text(encoding="utf-8"))
        for task in tasks:
            task["annotations"] = [{"result": task["predictions"][0]["result"]}]
        files[fmt].write_text(json.dumps(tasks, ensure_ascii=False), encoding="utf-8")
    corpus, report = read_spans(str(files[fmt]))
    assert [(s.words, s.tags) for s in corpus.sentences] == expected
    assert report.tally.problems == []
    # doccano's spans carry no text: those after an emoji rest on the code point assumption
    assumed = 0
    for line in files["jsonl"].read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        text = rec["text"]
        assumed += sum(any(ord(c) > 0xFFFF for c in text[: e["end"]]) for e in rec["entities"])
    assert report.tally.assumed == (assumed if fmt == "doccano" else 0)
    assert fmt != "doccano" or assumed >= 2


def test_label_studio_pre_annotations(tagged_files):
    files, ckpt = tagged_files
    tasks = json.loads(files["label-studio"].read_text(encoding="utf-8"))
    words = [line for line in LINES if line.strip()]  # blank lines hold nothing to annotate
    assert [t["data"] for t in tasks] == [
        {"text": line, "line": n} for n, line in enumerate(LINES, 1) if line.strip()
    ]
    assert len(tasks) == len(words)
    for task in tasks:
        (prediction,) = task["predictions"]
        assert prediction["model_version"] == ckpt
        assert 0.0 < prediction["score"] <= 1.0
        ids = [r["id"] for r in prediction["result"]]
        assert len(set(ids)) == len(ids)
        for r in prediction["result"]:
            assert (r["from_name"], r["to_name"], r["type"]) == ("label", "text", "labels")
            value = r["value"]
            assert task["data"]["text"][value["start"] : value["end"]] == value["text"]
            assert len(value["labels"]) == 1 and 0.0 < r["score"] == value["score"] <= 1.0
            assert prediction["score"] <= r["score"]  # the least sure word's, at most
