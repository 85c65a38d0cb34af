"""Frozen-encoder feature cache: each corpus is encoded once, its hidden states kept on disk.

With `NERTagger(freeze_encoder=True)` the encoder is a fixed function of the piece windows, so
every epoch (and every later run, e.g. a combiner sweep) can read its hidden states back instead
of recomputing them. Layout, one folder per key under `<root>/`:

    offsets.npy       int64 [windows + 1]   piece offset of each window (sentence-major order)
    first_window.npy  int64 [sentences + 1] first window of each sentence
    layer-<i>.npy     float16 [pieces, hidden], hidden state i (0 = embeddings), memory-mapped

The key hashes what determines the features: the encoder's config and weights, the forward
precision, and the exact piece windows (which follow from the data file's contents, the tokenizer
and the window/stride/context settings). Layers are files of their own, so a combiner that needs a
layer already stored reuses it and only missing layers cost an encoding pass.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import torch
from torch import Tensor, nn

from ner.data.batching import batches_by_length, piece_budget
from ner.utils.errors import NERError
from ner.utils.files import atomic_write, exclusive

VERSION = 1
FLOAT16_MAX = float(np.finfo(np.float16).max)


def encoder_fingerprint(encoder: nn.Module) -> str:
    """sha256 of the encoder's config and every weight (in name order)."""
    digest = hashlib.sha256()
    config = getattr(encoder, "config", None)
    if config is not None:
        digest.update(config.to_json_string(use_diff=False).encode())
    for name, tensor in sorted(encoder.state_dict().items()):
        digest.update(name.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def window_arrays(dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(piece ids of all windows concatenated, pieces per window, windows per sentence)."""
    column = dataset.with_format("arrow")["input_ids"]  # [sentences][windows][pieces]
    if hasattr(column, "combine_chunks"):
        column = column.combine_chunks()
    windows = pc.list_flatten(column)
    ids = pc.list_flatten(windows).to_numpy(zero_copy_only=False).astype(np.int32)
    lengths = pc.list_value_length(windows).to_numpy(zero_copy_only=False).astype(np.int64)
    rows = pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
    return ids, lengths, rows


def cache_key(encoder_digest: str, precision: str, ids, lengths, rows) -> str:
    """The folder name for these windows under this encoder."""
    digest = hashlib.sha256(f"v{VERSION}|{encoder_digest}|{precision}|".encode())
    for array in (ids, lengths, rows):
        digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(b"|")
    return digest.hexdigest()[:32]


class FeatureStore:
    """Read side: the stored hidden states of one corpus, per sentence, memory-mapped."""

    def __init__(self, directory: str | Path, layers: list[int]):
        self.directory, self.layers = Path(directory), list(layers)
        self.offsets = np.load(self.directory / "offsets.npy")
        self.first_window = np.load(self.directory / "first_window.npy")
        self._arrays: list[np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # DataLoader workers reopen the maps instead of receiving pickled copies of the arrays
        return {**self.__dict__, "_arrays": None}

    @property
    def arrays(self) -> list[np.ndarray]:
        if self._arrays is None:
            # plain ndarray views of the maps: slicing an np.memmap costs a subclass per slice
            self._arrays = [
                np.load(self.directory / f"layer-{i}.npy", mmap_mode="r").view(np.ndarray)
                for i in self.layers
            ]
        return self._arrays

    def sentence(self, index: int) -> list[list[np.ndarray]]:
        """Per window of sentence `index`, per layer, a `[pieces, hidden]` float16 view of the
        map (no copy). Batches gather a whole batch at once instead (`ner.data.feature_batches`)."""
        arrays, out = self.arrays, []
        for w in range(self.first_window[index], self.first_window[index + 1]):
            start, end = self.offsets[w], self.offsets[w + 1]
            out.append([a[start:end] for a in arrays])
        return out


def padded(ids, offsets, lengths, windows: list[int], pad_id: int) -> tuple[Tensor, Tensor]:
    """`input_ids` and `attention_mask` `[len(windows), longest]` of some stored windows."""
    longest = int(lengths[windows].max())
    input_ids = torch.full((len(windows), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(windows), longest), dtype=torch.long)
    for r, w in enumerate(windows):
        n = int(lengths[w])
        input_ids[r, :n] = torch.from_numpy(ids[offsets[w] : offsets[w] + n])
        mask[r, :n] = 1
    return input_ids, mask


class FeatureCache:
    """Write side: encode a tokenized corpus once with a frozen encoder, or find it encoded.

    `layers`: absolute hidden-state indices to keep (the combiner's `layer_indices`).
    `forward_context`: the trainer's precision context (fp32 / bf16 autocast) for the pass.
    `max_pieces`: padded pieces a batch (None: `ner.data.batching.piece_budget`).
    """

    def __init__(
        self,
        encoder: nn.Module,
        layers: list[int],
        forward_context: Callable[[], Any] = contextlib.nullcontext,
        precision: str = "32-true",
        max_pieces: int | None = None,
        log: Callable[[str], None] = print,
    ):
        self.encoder, self.layers = encoder, sorted(set(layers))
        self.forward_context, self.precision = forward_context, precision
        self.max_pieces, self.log = max_pieces, log
        self._encoder_digest: str | None = None

    @classmethod
    def for_trainer(cls, encoder: nn.Module, layers: list[int], trainer) -> FeatureCache:
        """A cache that encodes in the trainer's precision; whichever rank encodes says so."""
        plugin = trainer.precision_plugin
        return cls(encoder, layers, plugin.forward_context, str(trainer.precision), log=_stderr)

    def store(self, dataset, root: str | Path, pad_id: int = 0, name: str = "") -> FeatureStore:
        """The features of `dataset` (tokenized by `ner.data.dataset.tokenize_dataset`) under
        `root`, encoding the missing layers first. Processes that share `root` (the ranks of a
        machine, machines on a shared disk) take turns on the key's lock: the first encodes,
        the others read what it wrote; a machine with a disk of its own encodes its own."""
        if self._encoder_digest is None:
            self._encoder_digest = encoder_fingerprint(self.encoder)
        ids, lengths, rows = window_arrays(dataset)
        directory = Path(root) / cache_key(self._encoder_digest, self.precision, ids, lengths, rows)
        directory.mkdir(parents=True, exist_ok=True)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        first_window = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        # offsets.npy doubles as the key's lock (a file of its own would litter the folders)
        with exclusive(directory / "offsets.npy") as index:
            _write_in_place(index, offsets)
            if not _holds(directory / "first_window.npy", first_window):
                with atomic_write(directory / "first_window.npy", binary=True) as out:
                    np.save(out, first_window, allow_pickle=False)
            missing = [i for i in self.layers if not (directory / f"layer-{i}.npy").is_file()]
            if missing:
                self._build(directory, missing, ids, lengths, offsets, pad_id, name)
        return FeatureStore(directory, self.layers)

    def _build(self, directory: Path, layers, ids, lengths, offsets, pad_id: int, name: str):
        hidden = self.encoder.config.hidden_size
        tmp_paths = {i: directory / f".partial-{uuid.uuid4().hex}-layer-{i}.npy" for i in layers}
        maps = {
            i: np.lib.format.open_memmap(
                tmp_paths[i], mode="w+", dtype=np.float16, shape=(int(offsets[-1]), hidden)
            )
            for i in layers
        }
        device = next(self.encoder.parameters()).device
        was_training = self.encoder.training
        self.encoder.eval()
        started = time.perf_counter()
        try:
            budget = self.max_pieces or piece_budget(device, "bf16" in self.precision)
            batches = batches_by_length(lengths.tolist(), None, budget)
            for windows in batches:
                input_ids, mask = padded(ids, offsets, lengths, windows, pad_id)
                with torch.inference_mode(), self.forward_context():
                    out = self.encoder(
                        input_ids=input_ids.to(device),
                        attention_mask=mask.to(device),
                        output_hidden_states=True,
                    )
                for i in layers:
                    states = out.hidden_states[i].float()  # [windows, longest, hidden]
                    if states.abs().max() > FLOAT16_MAX:
                        raise NERError(
                            f"hidden state {i} exceeds the float16 range; "
                            "set model.cache_features false",
                            path="model.cache_features",
                        )
                    states = states.to(torch.float16).cpu().numpy()
                    for r, w in enumerate(windows):
                        maps[i][offsets[w] : offsets[w + 1]] = states[r, : lengths[w]]
            for i in layers:
                maps[i].flush()
                del maps[i]
                os.replace(tmp_paths[i], directory / f"layer-{i}.npy")
        finally:
            self.encoder.train(was_training)
            for path in tmp_paths.values():
                path.unlink(missing_ok=True)
        megabytes = len(layers) * int(offsets[-1]) * hidden * 2 / 2**20
        self.log(
            f"feature cache {name}: encoded {len(lengths)} windows, layers {layers}, "
            f"{megabytes:.0f} MiB, {time.perf_counter() - started:.1f} s -> {directory}"
        )


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _holds(path: Path, array: np.ndarray) -> bool:
    """Whether the .npy file at `path` holds exactly `array` (False if absent or torn)."""
    try:
        return path.read_bytes() == _npy_bytes(array)
    except FileNotFoundError:
        return False


def _write_in_place(handle, array: np.ndarray) -> None:
    """`array` as .npy into the open (locked) file, unless it holds it already: a write torn by
    a crash is found and rewritten by the next process to take the lock."""
    data = _npy_bytes(array)
    handle.seek(0)
    if handle.read() == data:
        return
    handle.seek(0)
    handle.truncate()
    handle.write(data)
    handle.flush()
    os.fsync(handle.fileno())
