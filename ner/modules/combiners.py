"""Layer combiners: the encoder's hidden-state tuple -> one vector per word piece.

The tuple from `output_hidden_states=True` has L + 1 entries `[rows, pieces, hidden]`: index 0 is
the embedding output, 1..L the layers; negative indices count from the end (-1 = last layer).
Every init argument is stored under its own name so a checkpoint can record and rebuild the
module (`ner.model.checkpoint.module_spec`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ner.utils.errors import NERError

LAST_FOUR = (-4, -3, -2, -1)


def resolve_layers(indices: Sequence[int], num_layers: int, field: str) -> list[int]:
    """Absolute tuple indices for `indices` (negative from the end); NERError on a bad one."""
    count = num_layers + 1
    if len(indices) == 0:
        raise NERError(f"{field}: needs at least one layer")
    out = []
    for index in indices:
        if isinstance(index, bool) or not isinstance(index, int) or not -count <= index < count:
            raise NERError(
                f"{field}: layer {index} does not exist; the encoder has {count} hidden states "
                f"(embeddings 0 and layers 1..{num_layers}; use -{count}..{num_layers})"
            )
        out.append(index % count)
    return out


class LayerCombiner(nn.Module):
    """Base class: `bind` to the encoder's depth, then `forward(hidden_states, mask)`."""

    needs_all_hidden_states: bool = True

    def __init__(self) -> None:
        super().__init__()
        self._indices: list[int] | None = None  # absolute tuple indices, set by bind
        self._num_states = 0  # length of the hidden-state tuple, set by bind

    def layer_indices(self, num_layers: int) -> list[int]:
        """Absolute indices into the `num_layers + 1` hidden states that this combiner reads."""
        raise NotImplementedError

    def output_dim(self, hidden_size: int) -> int:
        return hidden_size

    def deepest(self, num_layers: int) -> int:
        """The deepest hidden state this combiner reads: the encoder need compute no layer
        above it (`LastLayer`: all; `SingleLayer(k)`: k; `ConcatLayers`: the deepest listed)."""
        return max(self.layer_indices(num_layers))

    def bind(self, num_layers: int, hidden_size: int) -> int:
        """Validate against an encoder of `num_layers` layers, build parameters; the output dim."""
        self._indices = self.layer_indices(num_layers)
        self._num_states = num_layers + 1
        return self.output_dim(hidden_size)

    def combine_stored(self, stored: Tensor, layers: Sequence[int], mask: Tensor) -> Tensor:
        """`forward` over hidden states read from the feature cache: `stored [K, R, P, H]`
        (float16) holds the tuple indices `layers`. Only the states this combiner reads are
        converted to float32; the tuple holds None elsewhere."""
        if self._indices is None:
            raise RuntimeError(f"{type(self).__name__}.bind() must be called before forward")
        hidden: list[Tensor | None] = [None] * self._num_states
        wanted = set(self._indices)
        for k, layer in enumerate(layers):
            if layer in wanted:
                hidden[layer] = stored[k].float()  # [R, P, H]
        return self(hidden, mask)

    def weights(self) -> Tensor | None:
        """What the combiner learned about the layers, to log and plot: its mixing weights
        `[K]` over `layer_indices` (detached), or None for a combiner without any."""
        return None

    def selected(self, hidden_states: Sequence[Tensor]) -> list[Tensor]:
        """The hidden states this combiner reads, in order."""
        if self._indices is None:
            raise RuntimeError(f"{type(self).__name__}.bind() must be called before forward")
        return [hidden_states[i] for i in self._indices]


class LastLayer(LayerCombiner):
    """The last layer only (the encoder need not return the other hidden states)."""

    needs_all_hidden_states = False

    def layer_indices(self, num_layers: int) -> list[int]:
        return [num_layers]

    def forward(self, hidden_states: Sequence[Tensor], mask: Tensor) -> Tensor:
        # [-1] works on the full tuple and on the `(last,)` the tagger passes for this combiner.
        return hidden_states[-1]


class SingleLayer(LayerCombiner):
    """One hidden state, e.g. the second-to-last layer (`layer=-2`)."""

    def __init__(self, layer: int = -2):
        super().__init__()
        self.layer = layer

    def layer_indices(self, num_layers: int) -> list[int]:
        return resolve_layers([self.layer], num_layers, "combiner layer")

    def forward(self, hidden_states: Sequence[Tensor], mask: Tensor) -> Tensor:
        return self.selected(hidden_states)[0]


class SumLayers(LayerCombiner):
    """Sum of some hidden states (the BERT paper's "sum last four hidden")."""

    def __init__(self, layers: list[int] = LAST_FOUR):
        super().__init__()
        self.layers = list(layers)

    def layer_indices(self, num_layers: int) -> list[int]:
        return resolve_layers(self.layers, num_layers, "combiner layers")

    def forward(self, hidden_states: Sequence[Tensor], mask: Tensor) -> Tensor:
        return torch.stack(self.selected(hidden_states)).sum(0)


class MeanLayers(SumLayers):
    """Mean of some hidden states."""

    def forward(self, hidden_states: Sequence[Tensor], mask: Tensor) -> Tensor:
        return torch.stack(self.selected(hidden_states)).mean(0)


class ConcatLayers(SumLayers):
    """Concatenation of some hidden states: `len(layers) * hidden` features."""

    def output_dim(self, hidden_size: int) -> int:
        return len(self.layers) * hidden_size

    def forward(self, hidden_states: Sequence[Tensor], mask: Tensor) -> Tensor:
        return torch.cat(self.selected(hidden_states), dim=-1)


class ScalarMix(LayerCombiner):
    """`gamma * sum_k softmax(w)_k h_k` (ELMo; AllenNLP `ScalarMix`), over all states by default.

    `layer_norm`: normalise each state first, with statistics over the unmasked pieces of the whole
    batch (AllenNLP's `_do_layer_norm`). `dropout`: in training, drop whole weights by setting
    their logits to -1e20 before the softmax (UDify's `ScalarMixWithDropout`).
    """

    def __init__(
        self, layers: list[int] | None = None, layer_norm: bool = False, dropout: float = 0.0
    ):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise NERError(f"combiner dropout: must be in [0, 1), got {dropout}")
        self.layers = None if layers is None else list(layers)
        self.layer_norm = layer_norm
        self.dropout = dropout
        self.scalar_parameters: nn.Parameter | None = None
        self.gamma: nn.Parameter | None = None

    def layer_indices(self, num_layers: int) -> list[int]:
        if self.layers is None:
            return list(range(num_layers + 1))
        return resolve_layers(self.layers, num_layers, "combiner layers")

    def bind(self, num_layers: int, hidden_size: int) -> int:
        dim = super().bind(num_layers, hidden_size)
        # Zero logits: equal weights to start with, i.e. the mean of the states.
        self.scalar_parameters = nn.Parameter(torch.zeros(len(self._indices)))
        self.gamma = nn.Parameter(torch.ones(1))
        return dim

    def weights(self) -> Tensor:
        """The mixing weights `[K]` (softmax'ed, detached), logged as `combiner/weight_k`."""
        if self.scalar_parameters is None:
            raise RuntimeError("ScalarMix.bind() must be called first")
        return torch.softmax(self.scalar_parameters.detach(), dim=0)

    def _step_weights(self) -> Tensor:
        """This step's mixing weights `[K]`, with the weight dropout of training."""
        logits = self.scalar_parameters
        if self.training and self.dropout > 0:
            dropped = torch.rand_like(logits) < self.dropout
            logits = logits.masked_fill(dropped, -1e20)
        return torch.softmax(logits, dim=0)

    def _mix(self, weights: Tensor, stacked: Tensor) -> Tensor:
        """`gamma * sum_k weights_k stacked_k` over `stacked [K, R, P, H]` (any float dtype)."""
        # one matrix product instead of K multiplies and adds (and, backward, K more multiplies
        # and reductions): the mix is most of the step when the features come from the cache.
        # fp32 even under autocast: the weights are a few near-equal numbers that bf16 would round
        with torch.autocast(stacked.device.type, enabled=False):
            mixed = torch.tensordot(weights.float(), stacked.float(), dims=1)  # [R, P, H]
        return self.gamma * mixed

    def forward(self, hidden_states: Sequence[Tensor], mask: Tensor) -> Tensor:
        states = self.selected(hidden_states)
        weights = self._step_weights()
        if self.layer_norm:
            states = [masked_layer_norm(h, mask) for h in states]
        return self._mix(weights, torch.stack(states))  # stacked: [K, rows, pieces, hidden]

    def combine_stored(self, stored: Tensor, layers: Sequence[int], mask: Tensor) -> Tensor:
        """The stored block mixed as it is (one float32 conversion, no per-layer copies and no
        stack) when it holds exactly this mix's states in order; else as `forward`."""
        if self.layer_norm or self._indices is None or list(layers) != self._indices:
            return super().combine_stored(stored, layers, mask)
        return self._mix(self._step_weights(), stored)


def masked_layer_norm(tensor: Tensor, mask: Tensor, eps: float = 1e-12) -> Tensor:
    """`(x - mean) / std` with one mean and std over all unmasked pieces and features (AllenNLP)."""
    keep = mask.bool().unsqueeze(
        -1
    )  # [R, P, 1]; where(), not a product, so padding can be anything
    count = (keep.sum() * tensor.shape[-1]).clamp(min=1)
    mean = torch.where(keep, tensor, 0.0).sum() / count
    variance = torch.where(keep, tensor - mean, 0.0).pow(2).sum() / count
    return (tensor - mean) / torch.sqrt(variance + eps)
