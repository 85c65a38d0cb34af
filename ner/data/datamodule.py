"""`NERDataModule`: CoNLL files or a hub dataset -> aligned windows -> length-bucketed batches."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_info
from torch.utils.data import DataLoader

from ner.corpus.inputs import PredictInput
from ner.corpus.reader import Corpus
from ner.corpus.span_corpus import CorpusFormat
from ner.data import dataset as ds
from ner.data.batching import LengthBucketSampler, ResumableLoader, collate, window_lengths
from ner.data.feature_batches import FeatureBatches, ready
from ner.data.packing import pack_dataset
from ner.data.pretrained import encoder_config, load_tokenizer
from ner.data.splits import Splits
from ner.data.windows import WindowSettings, default_windows
from ner.utils.errors import NERError

STAGE_SPLITS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}


class NERDataModule(pl.LightningDataModule):
    """CoNLL files (or a hub dataset) -> tokenized, cached `datasets` -> length-bucketed batches.

    Window settings, tokenizer and labels left unset are taken from the model being run when it
    carries them (a tagger loaded from a checkpoint), so evaluation cuts windows as training did.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        train_file: str | None = None,
        val_file: str | None = None,
        test_file: str | None = None,
        predict_file: str | None = None,
        predict_format: str = "auto",
        hub_name: str | None = None,
        tokenizer: str | None = None,
        max_length: int | None = None,
        stride: int | None = None,
        context_pieces: int | None = None,
        pack_words: int = 0,
        batch_size: int = 16,
        max_pieces: int | None = None,
        num_workers: int = 0,
        seed: int = 42,
        scheme: str = "auto",
        tag_column: int = -1,
        format: str = "auto",
        misaligned: str = "refuse",
        offsets: str = "codepoints",
        cache_dir: str | None = None,
        labels: list[str] | None = None,
    ):
        """Args:
        data_dir: folder with eng.train/eng.testa/eng.testb or train/dev/test (.txt or .conll).
        train_file, val_file, test_file: CoNLL or span files, each overriding the folder's/hub's.
        predict_file: text (one passage a line) or CoNLL file to tag with `ner predict`.
        predict_format: auto (by extension, else content), text or conll.
        hub_name: hub dataset, `save_to_disk` folder or parquet file with `tokens` + `ner_tags`.
        tokenizer: tokenizer name or path (linked from `model.encoder`).
        max_length: pieces a window, specials included (None: the checkpoint's, else the rule).
        stride: pieces between window starts of a sentence longer than a window (None: half).
        context_pieces: pieces of the document's other sentences a side (None: ckpt's, else 0).
        pack_words: train on packs of a document's sentences of up to N words (0: off).
        batch_size: sentences (training packs, with pack_words) per batch (16: docs/results.md).
        max_pieces: padded pieces (windows x longest) per batch, instead of batch_size.
        num_workers: DataLoader workers.
        seed: seed of the training batch order (linked from `seed_everything`).
        scheme, tag_column: the CoNLL files' tag scheme (auto, IOB1, IOB2, BIOES) and tag column.
        format: auto (by content), conll, jsonl-ner, spacy, doccano or label-studio (span files).
        misaligned, offsets: span files: refuse/expand/drop misaligned spans; codepoints/utf16.
        cache_dir: caches the aligned splits and frozen features (`ner fit`: runs/RUN/cache).
        labels: the IOB2 label set (None: from the training data, or the checkpoint's).
        """
        super().__init__()
        self.max_length, self.stride, self.context_pieces = max_length, stride, context_pieces
        self.batch_size, self.max_pieces, self.pack_words = batch_size, max_pieces, pack_words
        self.tokenizer_name, self.num_workers, self.seed = tokenizer, num_workers, seed
        self.cache_dir, self.hub_name = cache_dir, hub_name
        given = {"train": train_file, "val": val_file, "test": test_file, "predict": predict_file}
        reading = CorpusFormat(format, scheme, tag_column, misaligned, offsets)
        self.splits = Splits(given, data_dir, hub_name, reading, cache_dir, predict_format)
        self.datasets, self._feature_stores, self.zero_piece_words = {}, {}, {}  # by split
        self.feature_cache = self.inference = None  # the tagger's FeatureCache, InferenceBatching
        self._labels: list[str] | None = list(labels) if labels else None
        self.word_inputs: tuple[str, ...] = ()  # per-word inputs the model's features read
        self._tokenizer = self._settings = self._model_settings = self._scratch = None  # lazy

    @property
    def files(self) -> dict[str, str | None]:
        """The file of each split (None: none, or the hub's)."""
        return self.splits.files

    @property
    def predict_input(self):
        """The prediction input read (`ner.corpus.inputs.PredictInput`), once predict is set up."""
        return self.splits.predict_input

    def corpus(self, split: str) -> Corpus:
        """The `reader.Corpus` of a file split, read once."""
        return self.splits.corpus(split)

    def predict_parts(self, part: int | None) -> Iterator[PredictInput]:
        """The predict file in parts of at most `part` passages, read lazily (setup tokenizes
        only the current part)."""
        return self.splits.predict_parts(part)

    # ---- what the model may supply -----------------------------------------------------------
    def use_model(self, model: Any) -> None:
        """Take the tokenizer, labels and window settings that `model` carries, for whatever
        this data module leaves unset (called by `setup` with the model being run)."""
        if self.tokenizer_name is None and self._tokenizer is None:
            self._tokenizer = getattr(model, "tokenizer", None)
        trains = self.splits.has("train")
        if self._labels is None and not trains and getattr(model, "labels", None):
            self._labels = list(model.labels)
        self.word_inputs = tuple(getattr(model, "word_inputs", ()))
        settings = getattr(model, "window_settings", None)
        if settings != self._model_settings:
            self._model_settings = settings
            self._settings = None
            self.datasets.clear()
            self._feature_stores.clear()

    @property
    def labels(self) -> list[str]:
        """The IOB2 label set of the training data (or the one given by `set_labels`)."""
        if self._labels is None:
            self._labels = self.splits.train_labels()
        return self._labels

    def set_labels(self, labels: list[str]) -> None:
        """Use `labels` (from a checkpoint) instead of the training data's."""
        self._labels = list(labels)
        self.datasets.clear()
        self._feature_stores.clear()

    def scheme_of(self, split: str) -> str:
        """A split's tag scheme (predictions are written back in it); hub data: IOB2."""
        return self.splits.scheme_of(split)

    @property
    def scheme_of_train(self) -> str:
        """The training file's tag scheme (the model writes predictions back in it)."""
        return self.scheme_of("train")

    @property
    def tokenizer(self):
        """The fast tokenizer: `data.tokenizer`, else the model's, loaded on first use."""
        if self._tokenizer is None:
            if not self.tokenizer_name:
                raise NERError("no tokenizer given", path="data.tokenizer")
            self._tokenizer = load_tokenizer(self.tokenizer_name)
        return self._tokenizer

    @property
    def window_settings(self) -> WindowSettings:
        """Window length, stride and context: the model's (its checkpoint's, or its encoder's
        default), else the encoder's default (`default_windows`), with what is set here on top."""
        if self._settings is None:
            base = self._model_settings
            if base is None:
                config = encoder_config(self.tokenizer_name) if self.tokenizer_name else None
                base = default_windows(self.tokenizer, config)
            self._settings = base.overridden(self.max_length, self.stride, self.context_pieces)
        return self._settings

    @property
    def num_zero_piece_words(self) -> int:
        """Words the tokenizer maps to no piece (fed as [UNK]), over the splits set up so far."""
        return sum(self.zero_piece_words.values())

    # ---- splits ------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        """Read, check and tokenize the splits of `stage` (fit also checks the test labels)."""
        model = self.trainer.lightning_module if self.trainer is not None else None
        if model is not None:
            self.use_model(model)
        if stage == "predict":
            splits = ["predict"]
        else:
            splits = [s for s in STAGE_SPLITS[stage] if self.splits.has(s)]
            if STAGE_SPLITS[stage][0] not in splits:
                raise NERError(f"no {STAGE_SPLITS[stage][0]} data given", path="data")
            # fail on an unknown dev/test tag before any training, not hours into it
            for split in ("val", "test"):
                if split in splits or stage == "fit":
                    self.splits.check_labels(split, self.labels)
        for split in splits:
            if split not in self.datasets or split == "predict":
                labels = None if split == "predict" else self.labels
                data = self.splits.dataset(split, labels)
                if split == "train" and self.pack_words > 0:
                    data = pack_dataset(data, self.pack_words)
                self._tokenize(split, data)

    def sentences(self, split: str) -> list[tuple[list[str], list[str]]]:
        """(words, gold IOB2 tags) of each sentence of a split set up, in `sent_id` order."""
        rows = self.datasets[split].select_columns(["tokens", "ner_tags"])
        labels = self.labels
        return [
            (words, [labels[t] if t >= 0 else "O" for t in tags])
            for words, tags in zip(rows["tokens"], rows["ner_tags"], strict=True)
        ]

    def documents(self, split: str) -> tuple[list[list[str]], list[int]]:
        """Each sentence's words and document id in a split set up, in `sent_id` order."""
        rows = self.datasets[split].select_columns(["tokens", "doc_id"])
        return rows["tokens"], rows["doc_id"]

    @property
    def cache_root(self) -> Path | None:
        """Where tokenized splits (and, under `features/`, a frozen encoder's hidden states) are
        cached: `cache_dir`, or None (nothing written but temporary feature files)."""
        return Path(self.cache_dir) if self.cache_dir else None

    def _features_root(self) -> Path:
        if self.cache_root is not None:
            return self.cache_root / "features"
        if self._scratch is None:  # no cache asked for: features live as long as the process
            self._scratch = tempfile.mkdtemp(prefix="ner-features-")
            atexit.register(shutil.rmtree, self._scratch, ignore_errors=True)
        return Path(self._scratch)

    def use_feature_cache(self, cache) -> None:
        """Serve train/val/test batches with stored hidden states from `cache` (a `FeatureCache`),
        encoding each split once when its loader is built."""
        self.feature_cache = cache
        self._feature_stores.clear()

    def _tokenize(self, split: str, data) -> None:
        settings = self.window_settings
        root = None if self.cache_root is None else str(self.cache_root)
        data = ds.tokenize_dataset(data, self.tokenizer, settings, root)
        self.datasets[split] = data
        zero = pc.sum(data.with_format("arrow")["zero_piece_words"]).as_py() or 0
        self.zero_piece_words[split] = zero
        if zero:
            rank_zero_info(f"{split}: {zero} words have no word pieces; they are fed as [UNK]")

    # ---- loaders -----------------------------------------------------------------------------
    def sampler(self, split: str) -> LengthBucketSampler:
        """The batch sampler of a split set up: shuffled for train, length order otherwise."""
        lengths, rows = window_lengths(self.datasets[split].with_format("arrow")["input_ids"])
        batch_size = None if self.max_pieces else self.batch_size
        order = getattr(self.inference, "batches", None) if split == "predict" else None
        return LengthBucketSampler(lengths, rows, batch_size, self.max_pieces, split == "train",
                                   self.seed, order=order)  # fmt: skip

    def _loader(self, split: str) -> DataLoader:
        if split not in self.datasets:
            return []  # type: ignore[return-value]  # Lightning skips a loop with no loader
        pad_id = self.tokenizer.pad_token_id or 0
        if self.feature_cache is not None and split != "predict":
            # built here, not in setup: the model is on its device by the time loaders are made
            if split not in self._feature_stores:
                root = self._features_root()
                store = self.feature_cache.store(self.datasets[split], root, pad_id, split)
                self._feature_stores[split] = store
            store = self._feature_stores[split]
            data: Any = FeatureBatches(self.datasets[split], store, self.word_inputs)
            collate_fn: Any = ready  # whole batches come out of the dataset, finished
        else:
            columns = ["input_ids", "piece_word", "ner_tags", "sent_id"]
            columns += ["tokens"] if self.word_inputs else []
            data = self.datasets[split].select_columns(columns)
            how = self.inference.collate if split == "predict" and self.inference else collate
            collate_fn = partial(how, pad_id=pad_id, word_inputs=self.word_inputs)
        return ResumableLoader(
            data,
            batch_sampler=self.sampler(split),
            collate_fn=collate_fn,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._loader("predict")
