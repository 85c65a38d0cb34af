"""What several processes (torch.distributed) share: results gathered from every rank."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.distributed as dist


def is_distributed() -> bool:
    """Whether this process is one of several (a process group is up)."""
    return dist.is_available() and dist.is_initialized()


def merged(mapping: Mapping[Any, Any]) -> dict[Any, Any]:
    """Every rank's mapping merged into one, on every rank (the mapping itself alone)."""
    if not is_distributed():
        return dict(mapping)
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, dict(mapping))
    return {k: v for part in parts for k, v in part.items()}
