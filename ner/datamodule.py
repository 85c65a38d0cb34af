"""`NERDataModule`: CoNLL files or a hub dataset -> aligned windows -> length-bucketed batches."""

from __future__ import annotations

import random
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_info
from torch import Tensor
from torch.utils.data import DataLoader, Sampler

from ner import dataset as ds
from ner.errors import NERError
from ner.feature_cache import WithFeatures
from ner.schemes import entity_types, label_list

# file names looked for in `data_dir`, per split (CoNLL-2003 names first)
SPLIT_FILES = {
    "train": ("eng.train", "train.txt", "train.conll"),
    "val": ("eng.testa", "dev.txt", "dev.conll"),
    "test": ("eng.testb", "test.txt", "test.conll"),
}
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}
STAGE_SPLITS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}


def collate(rows: list[dict[str, Any]], pad_id: int = 0) -> dict[str, Tensor]:
    """One batch (docs/design.md) from tokenized rows (`input_ids`, `piece_word`, `ner_tags`,
    optional `sent_id`, optional stored `features`), padded to this batch's longest window and
    sentence only."""
    num_words = max(len(r["ner_tags"]) for r in rows)  # W
    windows = [
        (b, ids, pw)
        for b, r in enumerate(rows)
        for ids, pw in zip(r["input_ids"], r["piece_word"], strict=True)
    ]
    pieces = max(len(ids) for _, ids, _ in windows)  # P
    input_ids, piece_word, mask = [], [], []
    for b, ids, pw in windows:
        pad = pieces - len(ids)
        input_ids.append(list(ids) + [pad_id] * pad)
        piece_word.append([w + b * num_words if w >= 0 else -1 for w in pw] + [-1] * pad)
        mask.append([1] * len(ids) + [0] * pad)
    labels = [list(r["ner_tags"]) + [-100] * (num_words - len(r["ner_tags"])) for r in rows]
    word_mask = [
        [True] * len(r["ner_tags"]) + [False] * (num_words - len(r["ner_tags"])) for r in rows
    ]
    batch = {
        "input_ids": torch.tensor(input_ids, dtype=torch.long),  # [R, P]
        "attention_mask": torch.tensor(mask, dtype=torch.long),  # [R, P]
        "piece_word": torch.tensor(piece_word, dtype=torch.long),  # [R, P] flat b * W + w
        "labels": torch.tensor(labels, dtype=torch.long).view(len(rows), num_words),  # [B, W]
        "word_mask": torch.tensor(word_mask, dtype=torch.bool).view(len(rows), num_words),
        "sent_id": torch.tensor([r.get("sent_id", b) for b, r in enumerate(rows)]),  # [B]
    }
    if "features" in rows[0]:  # stored hidden states (ner.feature_cache): window -> layer -> [p, H]
        per_window = [f for r in rows for f in r["features"]]
        layers, hidden = len(per_window[0]), per_window[0][0].shape[1]
        features = np.zeros((layers, len(per_window), pieces, hidden), dtype=np.float16)
        for j, window in enumerate(per_window):
            for k, states in enumerate(window):
                features[k, j, : len(states)] = states
        batch["features"] = torch.from_numpy(features)  # [K, R, P, H] float16
        batch["feature_layers"] = torch.tensor(rows[0]["feature_layers"])  # [K]
    return batch


def batches_by_length(
    lengths: list[int],
    batch_size: int | None = 32,
    max_pieces: int | None = None,
    rows: list[int] | None = None,
) -> list[list[int]]:
    """Indices sorted by length (stable), cut into batches of at most `batch_size` sentences and
    at most `max_pieces` padded pieces (rows x longest; a sentence over the budget goes alone)."""
    batches: list[list[int]] = []
    batch: list[int] = []
    num_rows = longest = 0
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        r = rows[i] if rows is not None else 1
        full = batch_size is not None and len(batch) >= batch_size
        over = max_pieces is not None and (num_rows + r) * max(longest, lengths[i]) > max_pieces
        if batch and (full or over):
            batches.append(batch)
            batch, num_rows, longest = [], 0, 0
        batch.append(i)
        num_rows += r
        longest = max(longest, lengths[i])
    if batch:
        batches.append(batch)
    return batches


def encoder_positions(name_or_path: str) -> int | None:
    """`max_position_embeddings` of the encoder at `name_or_path`, if it has a readable config."""
    from transformers import AutoConfig

    try:
        return int(AutoConfig.from_pretrained(name_or_path).max_position_embeddings)
    except (OSError, ValueError, AttributeError, TypeError):
        return None


class LengthBucketSampler(Sampler[list[int]]):
    """Batches of similar-length sentences.

    Training (`shuffle`): sentences shuffled (seed + epoch), sorted by length inside chunks of
    `chunk_size`, batch order shuffled. Else: one global length order. Under torch.distributed each
    rank takes every world_size-th batch; for training the batch list is first padded by repeating
    batches so every rank gets as many; for evaluation ranks may get one batch fewer (the metric
    dedups by `sent_id`). Run with `Trainer(use_distributed_sampler=False)`.
    """

    def __init__(
        self,
        lengths: list[int],
        rows: list[int],
        batch_size: int | None,
        max_pieces: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
        chunk_size: int = 4096,
    ):
        self.lengths, self.rows = lengths, rows
        self.batch_size, self.max_pieces = batch_size, max_pieces
        self.shuffle, self.seed, self.chunk_size = shuffle, seed, chunk_size
        self.epoch = 0
        self._cache: tuple[tuple[int, int, int], list[list[int]]] | None = None

    @property
    def sampler(self) -> LengthBucketSampler:
        # Lightning calls `batch_sampler.sampler.set_epoch(epoch)` each epoch (not the batch
        # sampler's own set_epoch)
        return self

    def set_epoch(self, epoch: int) -> None:
        """Vary the training order per epoch (deterministically)."""
        self.epoch = epoch

    def _all_batches(self) -> list[list[int]]:
        if not self.shuffle:
            return batches_by_length(self.lengths, self.batch_size, self.max_pieces, self.rows)
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        batches = []
        for start in range(0, len(order), self.chunk_size):
            chunk = order[start : start + self.chunk_size]
            lengths = [self.lengths[i] for i in chunk]
            rows = [self.rows[i] for i in chunk]
            for batch in batches_by_length(lengths, self.batch_size, self.max_pieces, rows):
                batches.append([chunk[j] for j in batch])
        rng.shuffle(batches)
        return batches

    def _batches(self) -> list[list[int]]:
        """This rank's batches for the current epoch."""
        rank, world = 0, 1
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        key = (self.epoch, rank, world)
        if self._cache is None or self._cache[0] != key:
            batches = self._all_batches()
            if world > 1 and self.shuffle:
                batches += batches[: -len(batches) % world]
            self._cache = key, batches[rank::world]
        return self._cache[1]

    def __iter__(self):
        yield from self._batches()

    def __len__(self) -> int:
        return len(self._batches())


class NERDataModule(pl.LightningDataModule):
    """CoNLL files (or a hub dataset) -> tokenized, cached `datasets` -> length-bucketed batches."""

    def __init__(
        self,
        data_dir: str | None = None,
        train_file: str | None = None,
        val_file: str | None = None,
        test_file: str | None = None,
        predict_file: str | None = None,
        hub_name: str | None = None,
        tokenizer: str | None = None,
        max_length: int | None = None,
        stride: int | None = None,
        context_pieces: int = 0,
        batch_size: int = 32,
        max_pieces: int | None = None,
        num_workers: int = 0,
        seed: int = 42,
        scheme: str = "auto",
        tag_column: int = -1,
        cache_dir: str | None = None,
        labels: list[str] | None = None,
    ):
        """Args:
        data_dir: folder with eng.train/eng.testa/eng.testb or train/dev/test (.txt or .conll).
        train_file, val_file, test_file: CoNLL files, each overriding the folder's (and the hub's).
        predict_file: text (one sentence a line) or CoNLL file to tag with `ner predict`.
        hub_name: hub dataset, `save_to_disk` folder or parquet file with `tokens` + `ner_tags`.
        tokenizer: tokenizer name or path (usually linked from `model.encoder`).
        max_length: pieces per window, specials included (None: the tokenizer's, at most 512).
        stride: pieces between window starts of a sentence longer than a window (None: half).
        context_pieces: pieces of neighbouring sentences of the document on each side (FLERT).
        batch_size: sentences per batch.
        max_pieces: padded pieces (windows x longest) per batch, instead of batch_size.
        num_workers: DataLoader workers.
        seed: seed of the training batch order.
        scheme: tag scheme of the files: auto, IOB1, IOB2 or BIOES.
        tag_column: column of the tag in the files.
        cache_dir: where tokenized datasets are cached (None: the datasets cache under `ner/`).
        labels: the IOB2 label set (None: from the training data; a checkpoint supplies its own).
        """
        super().__init__()
        self.data_dir, self.hub_name = data_dir, hub_name
        self.tokenizer_name = tokenizer
        self.max_length, self.stride, self.context_pieces = max_length, stride, context_pieces
        self.batch_size, self.max_pieces = batch_size, max_pieces
        self.num_workers, self.seed = num_workers, seed
        self.scheme, self.tag_column = scheme, tag_column
        self.cache_dir = cache_dir
        explicit = {"train": train_file, "val": val_file, "test": test_file}
        self.files = {split: explicit[split] or self._find(split) for split in SPLIT_FILES}
        self.files["predict"] = predict_file
        self.corpora: dict[str, Any] = {}  # split -> reader.Corpus, for writing predictions back
        self.datasets: dict[str, Any] = {}  # split -> tokenized datasets.Dataset
        self.zero_piece_words: dict[str, int] = {}
        self.predict_input = None  # predict_io.PredictInput once the predict split is set up
        self.feature_cache = None  # ner.feature_cache.FeatureCache, set by a frozen-encoder tagger
        self._feature_stores: dict[str, Any] = {}
        self._labels: list[str] | None = list(labels) if labels else None
        self._tokenizer = None
        self._max_positions: int | None = None

    def _find(self, split: str) -> str | None:
        if self.data_dir is None:
            return None
        if not Path(self.data_dir).is_dir():
            raise NERError("not a directory", path=self.data_dir)
        for name in SPLIT_FILES[split]:
            if (Path(self.data_dir) / name).is_file():
                return str(Path(self.data_dir) / name)
        return None

    # ---- labels and tokenizer ----------------------------------------------------------------
    @property
    def labels(self) -> list[str]:
        """The IOB2 label set of the training data (or the one given by `set_labels`)."""
        if self._labels is None:
            if self.files["train"]:
                sentences = self.corpus("train").sentences
                self._labels = label_list(entity_types(t for s in sentences for t in s.tags))
            elif self.hub_name:
                self._labels = ds.hub_labels(self.hub_name, HUB_SPLITS["train"], self.cache_dir)
            else:
                raise NERError("no training data to take the labels from", path="data.train_file")
        return self._labels

    @property
    def scheme_of_train(self) -> str:
        """The training file's tag scheme (predictions are written back in it); hub data: IOB2."""
        return self.corpus("train").scheme if self.files["train"] else "IOB2"

    def set_labels(self, labels: list[str]) -> None:
        """Use `labels` (from a checkpoint) instead of the training data's."""
        self._labels = list(labels)
        self.datasets.clear()
        self._feature_stores.clear()

    @property
    def tokenizer(self):
        """The fast tokenizer, loaded on first use."""
        if self._tokenizer is None:
            if not self.tokenizer_name:
                raise NERError("no tokenizer given", path="data.tokenizer")
            from ner.alignment import load_tokenizer

            name = self.tokenizer_name
            if not Path(name).exists():
                from ner.tagger import resolve_encoder  # the bundled encoder's package name

                name = resolve_encoder(name)
            self._tokenizer = load_tokenizer(name)
            self._max_positions = encoder_positions(name)
        return self._tokenizer

    @property
    def window(self) -> int:
        """Pieces per encoder window: `max_length`, else the tokenizer's limit capped by the
        encoder's position embeddings (a tokenizer may claim more than its model holds)."""
        if self.max_length is not None:
            return self.max_length
        from ner.alignment import default_max_length

        limit = default_max_length(self.tokenizer)
        return min(limit, self._max_positions) if self._max_positions else limit

    def set_tokenizer(self, tokenizer) -> None:
        """Use `tokenizer` (an object, or a name or path) instead of `data.tokenizer`."""
        if isinstance(tokenizer, str):
            self.tokenizer_name, self._tokenizer = tokenizer, None
        else:
            self._tokenizer = tokenizer
        self.datasets.clear()
        self._feature_stores.clear()

    @property
    def num_zero_piece_words(self) -> int:
        """Words the tokenizer maps to no piece (fed as [UNK]), over the splits set up so far."""
        return sum(self.zero_piece_words.values())

    # ---- splits ------------------------------------------------------------------------------
    def corpus(self, split: str):
        """The `reader.Corpus` of a file split, read once."""
        if split not in self.corpora:
            from ner.reader import read_conll

            self.corpora[split] = read_conll(self.files[split], self.scheme, self.tag_column)
        return self.corpora[split]

    def _has(self, split: str) -> bool:
        return bool(self.files[split]) or (self.hub_name is not None and split in HUB_SPLITS)

    def setup(self, stage: str) -> None:
        """Read, check and tokenize the splits of `stage` (fit also checks the test labels)."""
        from ner.reader import check_labels

        if stage == "predict":
            self._setup_predict()
            return
        splits = [s for s in STAGE_SPLITS[stage] if self._has(s)]
        if STAGE_SPLITS[stage][0] not in splits:
            raise NERError(f"no {STAGE_SPLITS[stage][0]} data given", path="data")
        # fail on an unknown dev/test tag before any training, not hours into it
        for split in ("val", "test"):
            if self.files[split] and (split in splits or stage == "fit"):
                check_labels(self.corpus(split), self.labels)
        for split in splits:
            if split not in self.datasets:
                if self.files[split]:
                    data = ds.corpus_to_dataset(self.corpus(split), self.labels)
                else:
                    data = ds.load_hub(
                        self.hub_name, HUB_SPLITS[split], self.labels, self.cache_dir
                    )
                self._tokenize(split, data)

    def _setup_predict(self) -> None:
        if "predict" in self.datasets:
            return
        if not self.files["predict"]:
            raise NERError("no predict file given", path="data.predict_file")
        from ner.predict_io import read_inputs

        self.predict_input = inp = read_inputs(self.files["predict"])
        if inp.corpus is not None:
            self.corpora["predict"] = inp.corpus
            data = ds.corpus_to_dataset(inp.corpus, None)
        else:  # text: every line its own document
            n = len(inp.sentences)
            data = ds.rows_to_dataset(inp.sentences, None, list(range(n)), None, inp.path)
        self._tokenize("predict", data)

    @property
    def cache_root(self) -> Path:
        """Where tokenized datasets (and under `features/`, frozen-encoder features) are cached."""
        import datasets

        return Path(self.cache_dir or Path(datasets.config.HF_DATASETS_CACHE) / "ner")

    def use_feature_cache(self, cache) -> None:
        """Serve train/val/test batches with stored hidden states from `cache` (a
        `ner.feature_cache.FeatureCache`), encoding each split once when its loader is built."""
        self.feature_cache = cache
        self._feature_stores.clear()

    def _tokenize(self, split: str, data) -> None:
        data = ds.tokenize_dataset(
            data,
            self.tokenizer,
            self.window,
            self.stride,
            self.context_pieces,
            str(self.cache_root),
        )
        self.datasets[split] = data
        zero = pc.sum(data.with_format("arrow")["zero_piece_words"]).as_py() or 0
        self.zero_piece_words[split] = zero
        if zero:
            rank_zero_info(f"{split}: {zero} words have no word pieces; they are fed as [UNK]")

    # ---- loaders -----------------------------------------------------------------------------
    def sampler(self, split: str) -> LengthBucketSampler:
        """The batch sampler of a split set up: shuffled for train, length order otherwise."""
        windows = self.datasets[split].with_format("arrow")["input_ids"]  # [sentences][rows][P]
        rows = pc.list_value_length(windows).to_numpy()
        pieces = pc.list_value_length(pc.list_flatten(windows)).to_numpy()  # per window
        # each sentence's longest window (every sentence has >= 1 window)
        first_row = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
        lengths = np.maximum.reduceat(pieces, first_row).tolist() if len(rows) else []
        rows = rows.tolist()
        batch_size = None if self.max_pieces else self.batch_size
        shuffle = split == "train"
        return LengthBucketSampler(lengths, rows, batch_size, self.max_pieces, shuffle, self.seed)

    def _loader(self, split: str) -> DataLoader:
        if split not in self.datasets:
            return []  # type: ignore[return-value]  # Lightning skips a loop with no loader
        columns = ["input_ids", "piece_word", "ner_tags", "sent_id"]
        data = self.datasets[split].select_columns(columns)
        pad_id = self.tokenizer.pad_token_id or 0
        if self.feature_cache is not None and split != "predict":
            # built here, not in setup: the model is on its device by the time loaders are made
            if split not in self._feature_stores:
                root = self.cache_root / "features"
                store = self.feature_cache.store(self.datasets[split], root, pad_id, split)
                self._feature_stores[split] = store
            data = WithFeatures(data, self._feature_stores[split])
        return DataLoader(
            data,
            batch_sampler=self.sampler(split),
            collate_fn=partial(collate, pad_id=pad_id),
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
