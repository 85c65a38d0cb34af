"""How sentences become encoder windows: `WindowSettings` and THE rule for the default window.

The settings are owned by the data (`--data.max_length`, `--data.stride`,
`--data.context_pieces`); the tagger records those it was trained with in its checkpoint, and
every later door (evaluation, `ner tag`, the server, the export) cuts windows from what the
checkpoint recorded, with whatever the data module sets explicitly on top
(`NERDataModule.use_model`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

MAX_WINDOW = 512  # tokenizers without a model_max_length report about 1e30


@dataclass(frozen=True)
class WindowSettings:
    """How sentences become encoder windows; recorded in a checkpoint, so that evaluation and
    inference cut windows exactly as training did."""

    max_length: int  # pieces a window holds, special tokens included
    stride: int | None = None  # pieces between window starts of a long sentence (None: half)
    context_pieces: int = 0  # pieces of the neighbouring sentences on each side (FLERT)

    def as_dict(self) -> dict[str, Any]:
        """The settings as plain values (for checkpoints and configs)."""
        return asdict(self)

    def overridden(
        self,
        max_length: int | None = None,
        stride: int | None = None,
        context_pieces: int | None = None,
    ) -> WindowSettings:
        """These settings with every value that is given (not None) replaced."""
        given = {"max_length": max_length, "stride": stride, "context_pieces": context_pieces}
        return replace(self, **{k: v for k, v in given.items() if v is not None})


def window_length(tokenizer, positions: int | None) -> int:
    """Pieces per encoder window: the tokenizer's limit, capped at 512 and at the encoder's
    position embeddings (a tokenizer may claim more than its model holds)."""
    limit = min(int(tokenizer.model_max_length), MAX_WINDOW)
    return min(limit, positions) if positions else limit


def default_windows(tokenizer, config: Any = None) -> WindowSettings:
    """The windows of a model trained without window options: the encoder's whole window
    (`window_length` of the tokenizer and the encoder `config`'s positions), half-window
    stride, no context."""
    positions = getattr(config, "max_position_embeddings", None)
    return WindowSettings(window_length(tokenizer, positions))
