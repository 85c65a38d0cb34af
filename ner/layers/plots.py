"""Pictures of `ner.layers.projection`: the panel grid of a frame, the GIF over epochs and the
scalar-mix weights over epochs, each written whole (`ner.utils.files.atomic_write`).
matplotlib (Agg, no pyplot state) and Pillow are imported only when a picture is drawn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ner.corpus.schemes import entity_type
from ner.utils.files import atomic_write

WRONG = "x"  # the marker laid over words the model tags wrongly


def _figure(width: float, height: float) -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: never a window, also without a display
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def type_colours(types: Sequence[str]) -> dict[str, Any]:
    """A fixed colour a gold type (types sorted), `O` light grey so entities stand out."""
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    named = sorted(t for t in set(types) if t != "O")
    colours: dict[str, Any] = {t: palette(i % 10) for i, t in enumerate(named)}
    colours["O"] = (0.75, 0.75, 0.75, 1.0)
    return colours


def plot_grid(rows: Mapping[str, Any], title: str) -> Any:
    """A matplotlib Figure: a row of panels a sample (`ner.layers.projection.Frame`), a panel
    each of its `names`, points coloured by gold type and crossed where the prediction is wrong."""
    cols = max(len(frame.names) for frame in rows.values())
    fig = _figure(2.0 * cols, 2.1 * len(rows) + 0.5)
    types = sorted({entity_type(t) for f in rows.values() for t in f.gold})
    colours = type_colours(types)
    for r, (label, frame) in enumerate(rows.items()):
        kinds = np.array([entity_type(t) for t in frame.gold])
        wrong = np.array(frame.predicted) != np.array(frame.gold)
        for c, name in enumerate(frame.names):
            ax = fig.add_subplot(len(rows), cols, r * cols + c + 1)
            points = frame.coords[c]  # [words, 2]
            for kind in types:  # O first in draw order would hide nothing: it is grey
                mask = kinds == kind
                ax.scatter(*points[mask].T, s=7, color=colours[kind], label=kind, linewidths=0)
            ax.scatter(*points[wrong].T, s=14, c="black", marker=WRONG, linewidths=0.6)
            ax.set_title(f"{label}: {name}\nsilhouette {frame.scores[c]:+.2f}", fontsize=7)
            ax.set_xticks([])
            ax.set_yticks([])
    from matplotlib.lines import Line2D

    def key(label: str, marker: str, colour: Any) -> Line2D:
        return Line2D([], [], ls="", marker=marker, color=colour, markersize=4, label=label)

    handles = [key(t, "o", colours[t]) for t in types] + [key("tagged wrong", WRONG, "black")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    return fig


def save_figure(fig: Any, path: Path, dpi: int) -> None:
    """The figure as a PNG at `path`, whole or not at all."""
    with atomic_write(path, binary=True) as out:
        fig.savefig(out, format="png", dpi=dpi)


def write_gif(path: Path, pngs: Sequence[Path], duration_ms: int = 800) -> int:
    """An animated GIF, one frame a PNG (looping); returns the frame count."""
    from PIL import Image

    frames = []
    for png in pngs:
        with Image.open(png) as image:
            frames.append(image.convert("RGB"))
    with atomic_write(path, binary=True) as out:
        frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:],
                       duration=duration_ms, loop=0)  # fmt: skip
    return len(frames)


def plot_mix(epochs: Sequence[int], weights: np.ndarray, layers: Sequence[int]) -> Any:
    """A Figure of the scalar-mix weights `[epochs, K]` over epochs, a line a hidden state."""
    fig = _figure(5.0, 3.0)
    ax = fig.add_subplot(1, 1, 1)
    for k, layer in enumerate(layers):
        ax.plot(epochs, weights[:, k], marker="o", markersize=3, label=f"state {layer}")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("softmax weight")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return fig
