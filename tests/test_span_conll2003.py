"""CoNLL-2003's eng.testa (3,250 sentences, words joined with single spaces) written as each span
format and read back: no tag changes. Words come from `ner tag`'s splitter, which cuts some
CoNLL-2003 tokens ("Corp." -> "Corp" "."; "n't" -> "n" "'t"): the independent answer is each
CoNLL word split alone, its tag carried to its pieces (I- after the first)."""

from __future__ import annotations

import json

import pytest

from ner.corpus.inputs import Passage
from ner.corpus.outputs import write_predictions
from ner.corpus.reader import read_conll
from ner.corpus.span_corpus import read_spans
from ner.corpus.text import split_words, words_and_offsets

pytestmark = pytest.mark.integration


def split_alone(words: list[str], tags: list[str]) -> tuple[list[str], list[str]]:
    """Each word split by the splitter on its own; the first piece keeps the word's IOB2 tag,
    the others continue its entity."""
    out_words, out_tags = [], []
    for word, tag in zip(words, tags, strict=True):
        pieces = [w for w, _, _ in split_words(word)]
        out_words += pieces
        out_tags += [tag] + ([tag if tag == "O" else "I-" + tag[2:]] * (len(pieces) - 1))
    return out_words, out_tags


def joined(words: list[str]) -> tuple[str, list[str], list[tuple[int, int]]]:
    """(text, words, offsets): the words joined with single spaces, as Passage wants them."""
    words, offsets, text = words_and_offsets(words)
    return text, words, offsets


@pytest.fixture(scope="module")
def testa(conll_dir):
    corpus = read_conll(conll_dir / "eng.testa")
    return [(s.words, s.tags) for s in corpus.sentences]


@pytest.mark.parametrize("fmt", ["jsonl", "spacy", "doccano", "label-studio"])
def test_eng_testa_round_trips_through_each_format(testa, tmp_path, fmt, capsys):
    passages = [Passage(i, *joined(words)) for i, (words, _) in enumerate(testa, 1)]
    path = tmp_path / f"testa.{fmt}"
    write_predictions(passages, [(tags, [1.0] * len(tags)) for _, tags in testa], fmt, str(path))
    if fmt == "label-studio":
        tasks = json.loads(path.read_text(encoding="utf-8"))
        for task in tasks:
            task["annotations"] = [{"result": task.pop("predictions")[0]["result"]}]
        path.write_text(json.dumps(tasks), encoding="utf-8")
    corpus, report = read_spans(str(path))
    back = [(s.words, s.tags) for s in corpus.sentences]
    reference = [split_alone(words, tags) for words, tags in testa]
    words_differ = sum(w != words for (w, _), (words, _) in zip(back, testa, strict=True))
    differ = sum(got != want for got, want in zip(back, reference, strict=True))
    with capsys.disabled():
        print(f"\n{fmt}: {len(back):,} sentences read back, {differ} differ from the reference "
              f"(words and tags), {words_differ} have words other than CoNLL's, "
              f"{len(report.tally.problems)} misaligned spans")  # fmt: skip
    assert len(back) == len(testa) == 3250
    assert differ == 0 and report.tally.problems == [] and report.tally.spans == 5942
    # the words differ from CoNLL's exactly where the splitter cuts a CoNLL token
    assert words_differ == sum(split_alone(w, t)[0] != w for w, t in testa)
