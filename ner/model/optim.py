"""The optimiser: AdamW with separate learning rates for the encoder and the rest."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn


def parameter_groups(
    named_parameters: Iterable[tuple[str, nn.Parameter]],
    encoder_lr: float,
    head_lr: float,
    weight_decay: float,
) -> list[dict[str, Any]]:
    """AdamW groups: `encoder.*` vs the rest (own learning rates), no decay on vectors."""
    groups: dict[tuple[float, float], list[nn.Parameter]] = {}
    for name, param in named_parameters:
        if not param.requires_grad:
            continue
        lr = encoder_lr if name.startswith("encoder.") else head_lr
        no_decay = param.ndim < 2  # biases, LayerNorm and scalar-mix weights
        groups.setdefault((lr, 0.0 if no_decay else weight_decay), []).append(param)
    return [{"params": p, "lr": lr, "weight_decay": wd} for (lr, wd), p in groups.items()]


def adamw(groups: list[dict[str, Any]], mixed_precision: bool) -> torch.optim.AdamW:
    """AdamW over `groups`: the fused kernel, or the multi-tensor one under mixed precision."""
    # The fused kernel, not the default per-tensor Python loop (a large share of a CPU step).
    # Lightning's mixed-precision plugin refuses gradient clipping with a fused optimizer (it
    # assumes one that unscales a GradScaler's gradients itself), bf16 included: foreach there.
    kernel = {"foreach": True} if mixed_precision else {"fused": True}
    return torch.optim.AdamW(groups, **kernel)


def linear_schedule(optimizer: torch.optim.Optimizer, warmup_ratio: float, total: int):
    """Linear warm-up over `warmup_ratio` of `total` steps, then linear decay to 0 (per step)."""
    from transformers import get_linear_schedule_with_warmup

    total = max(1, int(total))
    scheduler = get_linear_schedule_with_warmup(optimizer, int(warmup_ratio * total), total)
    return {"scheduler": scheduler, "interval": "step"}


def optimizer_of(
    model: nn.Module, encoder_lr: float, head_lr: float, weight_decay: float, mixed: bool
) -> torch.optim.AdamW:
    """AdamW over `model`'s trainable parameters, in the groups of `parameter_groups`."""
    groups = parameter_groups(model.named_parameters(), encoder_lr, head_lr, weight_decay)
    return adamw(groups, mixed)


def with_schedule(optimizer: torch.optim.Optimizer, warmup_ratio: float, total: int) -> dict:
    """What `configure_optimizers` returns: the optimizer and its per-step linear schedule."""
    return {"optimizer": optimizer, "lr_scheduler": linear_schedule(optimizer, warmup_ratio, total)}
