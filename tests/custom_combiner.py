"""A user's own combiner, in a module of its own: the CLI must accept it by class path."""

from __future__ import annotations

import torch
from torch import Tensor

from ner.modules.combiners import LayerCombiner, resolve_layers


class MaxOfLayers(LayerCombiner):
    """Element-wise max over chosen layers."""

    def __init__(self, layers: list[int] | None = None):
        super().__init__()
        self.layers = layers

    def layer_indices(self, num_layers: int) -> list[int]:
        return resolve_layers(self.layers or [-2, -1], num_layers, "combiner layers")

    def forward(self, hidden_states: tuple[Tensor, ...], mask: Tensor) -> Tensor:
        return torch.stack(self.selected(hidden_states)).amax(0)
