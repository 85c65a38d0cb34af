"""What a run shows in TensorBoard beyond the scalars the tagger and Lightning log (train and dev
loss, learning rates, dev F1 overall and per type, the combiner's weights `combiner/weight_k`):

- `TensorBoardExtras` (added by `ner fit` whenever a `TensorBoardLogger` runs): a layout of
  charts (dev F1 of every type in one chart, the combiner's weights in one, the learning rates
  in one) and, each validation, the combiner's weights as a bar chart (image
  `combiner/weights`), for a combiner that has weights (`LayerCombiner.weights()`).
- `log_frames` (called by the `LayerProjection` callback): each frame as images (the whole grid,
  `projection/grid`, and each panel alone, `projection/SPLIT/PANEL`) and the sampled words'
  vectors of every panel in the embedding projector (`SPLIT/PANEL`), with the word, its gold
  tag, the predicted tag and whether they agree as metadata.

Only global rank 0 writes (the logger's writer exists there only).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import TensorBoardLogger

from ner.layer_analysis.plots import figure_pixels, plot_panel, plot_weights
from ner.utils.extras import missing

METADATA = ["word", "gold", "predicted", "correct"]  # the projector's columns, per word


def writers(trainer) -> list[Any]:
    """The `SummaryWriter`s of the run's TensorBoard loggers on global rank 0; none elsewhere."""
    if not trainer.is_global_zero:
        return []
    return [lg.experiment for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]


def log_step(trainer) -> int:
    """The step Lightning gives the scalars logged now (during `fit`, the batches stepped so
    far, one less than `global_step` at a validation's end), so pictures line up with them."""
    loop = getattr(trainer, "fit_loop", None)
    stepped = getattr(getattr(loop, "epoch_loop", None), "_batches_that_stepped", None)
    return stepped if isinstance(stepped, int) else trainer.global_step


def layout(types: list[str]) -> dict[str, dict[str, list]]:
    """The Custom Scalars layout: one chart for the F1 of every type, one for the combiner's
    weights, one for the learning rates, one for the losses."""
    per_type = [f"^val/f1_{t}$" for t in types]
    return {
        "dev F1": {"micro, macro and per type": ["Multiline", ["^val/f1$", "^val/macro_f1$",
                                                               *per_type]]},
        "combiner": {"weight of each hidden state": ["Multiline", [r"^combiner/weight_\d+$"]]},
        "optimisation": {
            "learning rates": ["Multiline", [r"^lr-"]],
            "loss": ["Multiline", ["^train/loss", "^val/loss$"]],
        },
    }  # fmt: skip


class TensorBoardExtras(Callback):
    """The chart layout at the start of training and, at the end of each validation, the
    combiner's weights as a bar chart (`combiner/weights`), where a TensorBoardLogger runs.

    Args:
        dpi: of the bar chart.
    """

    def __init__(self, dpi: int = 80):
        self.dpi = dpi
        self._said = False

    def on_fit_start(self, trainer, pl_module) -> None:
        types = sorted({label[2:] for label in pl_module.labels if label != "O"})
        for writer in writers(trainer):
            writer.add_custom_scalars(layout(types))

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        targets = writers(trainer)
        weights = pl_module.combiner.weights()
        if trainer.sanity_checking or not targets or weights is None or not self._can_draw():
            return
        layers = pl_module.combiner.layer_indices(pl_module.encoder.config.num_hidden_layers)
        title = f"{type(pl_module.combiner).__name__} weights, epoch {trainer.current_epoch}"
        fig = plot_weights(weights.float().cpu().tolist(), layers, title)
        image = figure_pixels(fig, self.dpi)
        for writer in targets:
            writer.add_image("combiner/weights", image, log_step(trainer), dataformats="HWC")

    def _can_draw(self) -> bool:
        absent = missing("analysis")
        if absent and not self._said:
            self._said = True
            print(f"note: no combiner bar chart in TensorBoard: it needs {', '.join(absent)} "
                  "(pip install -e '.[analysis]')", file=sys.stderr)  # fmt: skip
        return not absent


def log_frames(
    targets: list[Any], frames: Mapping[str, Any], grid_png: Path, step: int, epoch: int,
    dpi: int, projector: bool = True,
) -> None:  # fmt: skip
    """A `LayerProjection` epoch into each writer: the grid picture as written to `grid_png`,
    each panel's picture, and (with `projector`) each panel's word vectors with metadata."""
    if not targets:
        return
    from PIL import Image

    with Image.open(grid_png) as png:
        grid = np.asarray(png.convert("RGB"))
    images = {"projection/grid": grid}
    for split, frame in frames.items():
        for k, name in enumerate(frame.names):
            fig = plot_panel(frame, k, split, f"epoch {epoch}")
            images[f"projection/{split}/{panel_tag(name)}"] = figure_pixels(fig, dpi)
    for writer in targets:
        for key, image in images.items():
            writer.add_image(key, image, step, dataformats="HWC")
        if projector:
            for split, frame in frames.items():
                _embed(writer, split, frame, step)


def panel_tag(name: str) -> str:
    """A panel's name as a tag part: `layer 3` -> `layer_3`."""
    return name.replace(" ", "_")


def _embed(writer, split: str, frame: Any, step: int) -> None:
    metadata = [
        [word, gold, predicted, "yes" if gold == predicted else "no"]
        for word, gold, predicted in zip(frame.words, frame.gold, frame.predicted, strict=True)
    ]
    for name, vectors in zip(frame.names, frame.vectors, strict=True):
        writer.add_embedding(
            np.asarray(vectors, dtype=np.float32), metadata=metadata,
            metadata_header=METADATA, global_step=step, tag=f"{split}/{panel_tag(name)}",
        )  # fmt: skip
