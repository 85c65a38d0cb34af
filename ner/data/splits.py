"""Where a data module's splits come from: CoNLL or span files (a folder or one file a split;
`ner.corpus.span_corpus`), a hub dataset (or a `save_to_disk` folder, or parquet), and the
prediction input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ner.corpus.inputs import PredictInput, iter_inputs, read_inputs
from ner.corpus.reader import Corpus, check_labels
from ner.corpus.schemes import entity_types, label_list
from ner.corpus.span_corpus import CorpusFormat, read_corpus
from ner.data import dataset as ds
from ner.utils.errors import NERError

# file names looked for in `data_dir`, per split (CoNLL-2003 names first)
SPLIT_FILES = {
    "train": ("eng.train", "train.txt", "train.conll"),
    "val": ("eng.testa", "dev.txt", "dev.conll"),
    "test": ("eng.testb", "test.txt", "test.conll"),
}
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}


def find_split_file(data_dir: str | None, split: str) -> str | None:
    """The file of `split` in `data_dir` (CoNLL-2003 names first), if there is one."""
    if data_dir is None:
        return None
    if not Path(data_dir).is_dir():
        raise NERError("not a directory", path=data_dir)
    for name in SPLIT_FILES[split]:
        if (Path(data_dir) / name).is_file():
            return str(Path(data_dir) / name)
    return None


class Splits:
    """The sources of train/val/test (files override the hub's splits) and of predict: `given`
    files (train, val, test, predict) and, for the splits not given, `data_dir`'s."""

    def __init__(
        self,
        given: dict[str, str | None],
        data_dir: str | None = None,
        hub_name: str | None = None,
        reading: CorpusFormat | None = None,
        cache_dir: str | None = None,
        predict_format: str = "auto",
    ):
        self.files = {s: given.get(s) or find_split_file(data_dir, s) for s in SPLIT_FILES}
        self.files["predict"] = given.get("predict")
        self.hub_name, self.reading = hub_name, reading or CorpusFormat()
        self.cache_dir, self.predict_format = cache_dir, predict_format
        self.corpora: dict[str, Corpus] = {}  # file split -> corpus, for writing predictions back
        self.predict_input: PredictInput | None = None
        self._predict_part: PredictInput | None = None  # set while `predict_parts` runs

    def has(self, split: str) -> bool:
        """Whether `split` has data (a file, or a split of the hub dataset)."""
        return bool(self.files.get(split)) or (self.hub_name is not None and split in HUB_SPLITS)

    def corpus(self, split: str) -> Corpus:
        """The `reader.Corpus` of a file split, read once."""
        if split not in self.corpora:
            self.corpora[split] = read_corpus(self.files[split], self.reading)
        return self.corpora[split]

    def train_labels(self) -> list[str]:
        """The IOB2 label set of the training data."""
        if self.files.get("train"):
            sentences = self.corpus("train").sentences
            return label_list(entity_types(t for s in sentences for t in s.tags))
        if self.hub_name:
            return ds.hub_labels(self.hub_name, HUB_SPLITS["train"], self.cache_dir)
        raise NERError("no training data to take the labels from", path="data.train_file")

    def scheme_of(self, split: str) -> str:
        """A file split's tag scheme (predictions are written back in it); hub data: IOB2."""
        return self.corpus(split).scheme if self.files.get(split) else "IOB2"

    def check_labels(self, split: str, labels: list[str]) -> None:
        """A one-line error at the first tag of a file split that `labels` lacks."""
        if self.files.get(split):
            check_labels(self.corpus(split), labels)

    def _predict_file(self) -> str:
        if not self.files.get("predict"):
            raise NERError("no predict file given", path="data.predict_file")
        return self.files["predict"]

    def predict_parts(self, part: int | None) -> Iterator[PredictInput]:
        """The predict file in parts of at most `part` passages (`iter_inputs`); while a part
        is current, `dataset("predict")` is that part, not the whole file."""
        try:
            for inp in iter_inputs(self._predict_file(), self.predict_format, part):
                self._predict_part = inp
                yield inp
        finally:
            self._predict_part = None

    def dataset(self, split: str, labels: list[str]):
        """The untokenized `datasets.Dataset` of a split (`ner.data.dataset` columns)."""
        if split == "predict":
            inp = self._predict_part or read_inputs(self._predict_file(), self.predict_format)
            self.predict_input = inp
            words = [p.words for p in inp.passages]
            return ds.rows_to_dataset(words, None, inp.doc_ids, None, inp.name)
        if self.files.get(split):
            return ds.corpus_to_dataset(self.corpus(split), labels)
        return ds.load_hub(self.hub_name, HUB_SPLITS[split], labels, self.cache_dir)
