"""CoNLL sentences written as each span format `ner tag` writes and read back as training data:
how many come back with other words or tags, and which CoNLL words the reading cut or joined.

Used by the round-trip tests; also a measurement on any CoNLL file:
`python tests/round_trip.py ../shared/data/conll2003/eng.testa` prints, per format, the sentences
that differ and the CoNLL words behind the differences."""

from __future__ import annotations

import difflib
import json
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ner.corpus.inputs import Passage
from ner.corpus.outputs import write_predictions
from ner.corpus.reader import read_conll
from ner.corpus.span_corpus import read_spans
from ner.corpus.text import words_and_offsets

FORMATS = ("jsonl", "spacy", "doccano", "label-studio")  # as `ner tag --format` names them
Sentence = tuple[list[str], list[str]]  # words and IOB2 tags


@dataclass
class RoundTrip:
    """What one format gave back."""

    format: str
    back: list[Sentence]
    differ: int  # sentences whose words or tags differ
    misaligned: int  # spans the reader found misaligned
    changes: Counter = field(default_factory=Counter)  # (CoNLL words, words read) -> times


def accept_predictions(path: Path) -> None:
    """What accepting a pre-annotation in Label Studio does: the prediction becomes the task's
    annotation (the reader takes annotations only). Written a task a line or more, as Label
    Studio exports it, so a task's line tells tasks apart."""
    tasks = json.loads(path.read_text(encoding="utf-8"))
    for i, task in enumerate(tasks, 1):
        task["id"] = i
        task["annotations"] = [{"id": i, "result": task.pop("predictions")[0]["result"]}]
    path.write_text(json.dumps(tasks, ensure_ascii=False, indent=2), encoding="utf-8")


def round_trip(sentences: list[Sentence], fmt: str, folder: Path) -> RoundTrip:
    """Write `sentences` (each its words joined with single spaces, as `ner tag` passes CoNLL
    input on) as `fmt`, read the file back, and compare."""
    passages = []
    for line, (words, _) in enumerate(sentences, 1):
        words, offsets, text = words_and_offsets(words)
        passages.append(Passage(line, text, words, offsets))
    path = folder / f"round-trip.{fmt}"
    write_predictions(passages, [(t, [1.0] * len(t)) for _, t in sentences], fmt, str(path))
    if fmt == "label-studio":
        accept_predictions(path)
    corpus, report = read_spans(str(path))
    back = [(s.words, s.tags) for s in corpus.sentences]
    result = RoundTrip(fmt, back, 0, len(report.tally.problems))
    for got, want in zip(back, sentences, strict=True):
        if got != want:
            result.differ += 1
            matcher = difflib.SequenceMatcher(a=want[0], b=got[0], autojunk=False)
            for op, a1, a2, b1, b2 in matcher.get_opcodes():
                if op != "equal":
                    result.changes[(" ".join(want[0][a1:a2]), " ".join(got[0][b1:b2]))] += 1
    return result


def main(paths: list[str]) -> int:
    """Print each format's round trip of each CoNLL file."""
    for path in paths:
        sentences = [(s.words, s.tags) for s in read_conll(path).sentences]
        print(f"{path}: {len(sentences):,} sentences")
        with tempfile.TemporaryDirectory() as folder:
            for fmt in FORMATS:
                got = round_trip(sentences, fmt, Path(folder))
                print(f"  {fmt:<13} {got.differ:>5,} differ, {got.misaligned} misaligned spans")
                for (want, read), n in got.changes.most_common():
                    print(f"    {n:>4} x {want!r} read as {read!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
