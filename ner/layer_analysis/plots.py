"""Pictures of `ner.layer_analysis.projection`: the panel grid of a frame (and a panel alone),
the GIF over epochs, the scalar-mix weights over epochs and as bars, each written whole
(`ner.utils.files.atomic_write`) or rendered to pixels for TensorBoard.
matplotlib (Agg, no pyplot state) and Pillow are imported only when a picture is drawn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ner.corpus.schemes import entity_type
from ner.utils.files import atomic_write

WRONG = "x"  # the marker laid over words the model tags wrongly


def new_figure(width: float, height: float) -> Any:
    """A matplotlib Figure of `width` x `height` inches, drawn off-screen (Agg)."""
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
    """A matplotlib Figure: a row of panels a sample (`ner.layer_analysis.projection.Frame`), a
    panel each of its `names`, points coloured by gold type and crossed where the prediction is
    wrong."""
    cols = max(len(frame.names) for frame in rows.values())
    fig = new_figure(2.0 * cols, 2.1 * len(rows) + 0.5)
    types = sorted({entity_type(t) for f in rows.values() for t in f.gold})
    for r, (label, frame) in enumerate(rows.items()):
        for c in range(len(frame.names)):
            draw_panel(fig.add_subplot(len(rows), cols, r * cols + c + 1), frame, c, label, types)
    _legend(fig, types)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    return fig


def plot_panel(frame: Any, panel: int, label: str, title: str) -> Any:
    """A Figure of one panel of a frame (one hidden state, or the combiner), as in the grid."""
    fig = new_figure(3.2, 3.5)
    types = sorted({entity_type(t) for t in frame.gold})
    draw_panel(fig.add_subplot(1, 1, 1), frame, panel, label, types)
    _legend(fig, types, ncol=3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    return fig


def draw_panel(ax: Any, frame: Any, panel: int, label: str, types: Sequence[str]) -> None:
    """One panel into `ax`: the frame's points of `panel` coloured by gold type (`types`, in
    a fixed order), crossed where the prediction is wrong, titled with the silhouette."""
    colours = type_colours(types)
    kinds = np.array([entity_type(t) for t in frame.gold])
    wrong = np.array(frame.predicted) != np.array(frame.gold)
    points = frame.coords[panel]  # [words, 2]
    for kind in types:  # O first in draw order would hide nothing: it is grey
        mask = kinds == kind
        ax.scatter(*points[mask].T, s=7, color=colours[kind], label=kind, linewidths=0)
    ax.scatter(*points[wrong].T, s=14, c="black", marker=WRONG, linewidths=0.6)
    ax.set_title(
        f"{label}: {frame.names[panel]}\nsilhouette {frame.scores[panel]:+.2f}", fontsize=7
    )
    ax.set_xticks([])
    ax.set_yticks([])


def _legend(fig: Any, types: Sequence[str], ncol: int | None = None) -> None:
    from matplotlib.lines import Line2D

    colours = type_colours(types)

    def key(label: str, marker: str, colour: Any) -> Line2D:
        return Line2D([], [], ls="", marker=marker, color=colour, markersize=4, label=label)

    handles = [key(t, "o", colours[t]) for t in types] + [key("tagged wrong", WRONG, "black")]
    fig.legend(handles=handles, loc="lower center", ncol=ncol or len(handles), fontsize=7,
               frameon=False)  # fmt: skip


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
    fig = new_figure(5.0, 3.0)
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


def plot_weights(weights: Sequence[float], layers: Sequence[int], title: str) -> Any:
    """A Figure of a combiner's weights `[K]` as bars, one a hidden state it reads."""
    fig = new_figure(4.0, 2.6)
    ax = fig.add_subplot(1, 1, 1)
    names = ["emb" if layer == 0 else str(layer) for layer in layers]
    ax.bar(range(len(weights)), weights, color=type_colours(["O"])["O"], edgecolor="black")
    ax.set_xticks(range(len(weights)), names, fontsize=7)
    ax.set_xlabel("hidden state", fontsize=8)
    ax.set_ylabel("weight", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def figure_pixels(fig: Any, dpi: int) -> np.ndarray:
    """The figure rendered at `dpi` as RGB pixels `[height, width, 3]` uint8 (for TensorBoard)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
