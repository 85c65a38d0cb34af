"""The encoder network: a pretrained BERT-style model loaded without its pooler, cut to the
layers a combiner reads (depth-aware), and its hidden states `(embeddings, layer_1 ..
layer_L)`: the one forward pass of the tagger, the feature cache and `ner embed`."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ner.data.pretrained import loading, no_progress_bar, resolve_encoder
from ner.utils.errors import NERError


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


def hidden_states(
    encoder, input_ids, attention_mask, all_states: bool = True, position_ids=None, segments=None
) -> tuple:
    """The encoder's hidden states `(embeddings, layer_1 .. layer_L)`, each `[rows, pieces,
    hidden]`; `all_states=False`: only the last, as `(last,)`. The one forward pass of the
    tagger, the feature cache and `ner embed`. `segments [rows, pieces]` (packed rows,
    `ner.data.row_packing`): a piece attends only to the pieces of its own segment, at its
    `position_ids`."""
    if segments is not None:
        attention_mask = block_mask(encoder, segments)
        position_ids = position_ids + position_start(encoder)  # packed rows count from 0
    out = encoder(
        input_ids=input_ids,
        attention_mask=attention_mask,
        output_hidden_states=all_states,
        **({"position_ids": position_ids} if position_ids is not None else {}),
    )
    # an encoder that computes no layer returns its embeddings as the last state, and no tuple
    return tuple(out.hidden_states or ()) if all_states and depth(encoder) else (
        out.last_hidden_state,)  # fmt: skip


def packed_inputs(batch: dict) -> dict:
    """The `position_ids` and `segments` of a batch of packed rows (none in a plain batch): the
    keyword arguments of `hidden_states` besides the ids and mask."""
    return {k: batch[k] for k in ("position_ids", "segments") if k in batch}


def block_mask(encoder, segments: Tensor) -> Tensor:
    """The 4D attention mask `[rows, 1, pieces, pieces]` of packed rows: a piece sees the pieces
    of its own segment only. transformers takes a 4D mask as given: boolean for scaled dot
    product attention, additive (0 or the dtype's minimum) for eager attention, which adds it."""
    same = (segments[:, :, None] == segments[:, None, :]).unsqueeze(1)  # [R, 1, P, P]
    if encoder.config._attn_implementation == "sdpa":
        return same
    dtype = encoder.dtype
    return torch.zeros(same.shape, dtype=dtype, device=segments.device).masked_fill(
        ~same, torch.finfo(dtype).min
    )


def position_start(encoder) -> int | None:
    """The position id the encoder gives a window's first piece when it numbers the pieces
    itself: 0 (BERT), or the padding id + 1 (MPNet, RoBERTa); None when neither matches, and
    packed rows (which number each window from it) cannot be used. Found by trying both."""
    if getattr(encoder, "position_start", "unknown") != "unknown":
        return encoder.position_start
    embeddings = getattr(encoder, "embeddings", None)
    found = None
    if embeddings is not None:
        device = next(embeddings.parameters()).device
        ids = torch.tensor([[3, 4, 5, 6]], device=device)  # no padding id among them
        pad = getattr(encoder.config, "pad_token_id", None) or 0
        training = embeddings.training
        embeddings.eval()
        with torch.no_grad():
            alone = embeddings(input_ids=ids)
            for start in (0, pad + 1):
                numbered = embeddings(
                    input_ids=ids, position_ids=torch.arange(start, start + 4, device=device)[None]
                )
                if torch.equal(numbered, alone):
                    found = start
                    break
        embeddings.train(training)
    encoder.position_start = found  # a plain attribute: neither a parameter nor a buffer
    return found
