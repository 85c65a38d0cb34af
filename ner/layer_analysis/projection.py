"""How the word vectors of each hidden state arrange by entity type, epoch by epoch: a fixed,
type-stratified sample of words, each hidden state (and the combiner's output) projected to 2-D,
every frame aligned to the one before. The `LayerProjection` callback draws it during training,
`ner project` once for a checkpoint; both go through the functions here.

Alignment: orthogonal Procrustes on centred points, rotation and reflection only, no scaling,
so a layer whose cloud spreads or shrinks shows it. Separation score: scikit-learn's silhouette
by gold type in the original (full-dimensional, Euclidean) space, not in the 2-D picture.
Sampled sentences are encoded one by one, without their document's context.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pytorch_lightning.callbacks import Callback

from ner.corpus.schemes import entity_type
from ner.inference.routine import iter_tags
from ner.layer_analysis.embed import WordStates, iter_word_states
from ner.layer_analysis.plots import plot_grid, plot_mix, save_figure, write_gif
from ner.layer_analysis.tensorboard import log_frames, log_step, panel_tag, writers
from ner.model.tagger import NERTagger
from ner.utils.errors import NERError
from ner.utils.extras import require
from ner.utils.files import atomic_write, writable_folder

METHODS = ("pca", "tsne")
Labelled = Sequence[tuple[Sequence[str], Sequence[str]]]  # (words, gold IOB2 tags) a sentence


@dataclass
class Sample:
    """A fixed set of words: the sentences holding them and where each word sits."""

    sentences: list[list[str]]  # the sentences that hold a sampled word, in corpus order
    tags: list[list[str]]  # their gold IOB2 tags
    picks: list[tuple[int, int]]  # (index into `sentences`, word index) of each sampled word

    @property
    def gold(self) -> list[str]:
        """The gold IOB2 tag of each sampled word."""
        return [self.tags[s][w] for s, w in self.picks]

    @property
    def words(self) -> list[str]:
        """Each sampled word."""
        return [self.sentences[s][w] for s, w in self.picks]


def stratified_sample(sentences: Labelled, per_type: int, seed: int, where: str) -> Sample:
    """Up to `per_type` words of each gold type (`O` is one type), drawn without replacement
    by a generator seeded with `seed`: the same sentences and seed give the same words."""
    if per_type < 1:
        raise NERError(f"must be at least 1, got {per_type}", path="sample")
    by_type: dict[str, list[tuple[int, int]]] = {}
    for s, (_, tags) in enumerate(sentences):
        for w, tag in enumerate(tags):
            by_type.setdefault(entity_type(tag), []).append((s, w))
    if not by_type:
        raise NERError("no words to project", path=where)
    rng = np.random.default_rng(seed)
    chosen: list[tuple[int, int]] = []
    for kind in sorted(by_type):  # a fixed order of draws, whatever order the types came in
        positions = by_type[kind]
        take = rng.choice(len(positions), size=min(per_type, len(positions)), replace=False)
        chosen += [positions[i] for i in take]
    chosen.sort()
    keep = sorted({s for s, _ in chosen})
    index = {s: i for i, s in enumerate(keep)}
    return Sample(
        [list(sentences[s][0]) for s in keep],
        [list(sentences[s][1]) for s in keep],
        [(index[s], w) for s, w in chosen],
    )


@contextmanager
def kept_modes(model: torch.nn.Module):
    """Run with gradients off and give every submodule back the train/eval mode it had
    (inference switches the model to eval; a frozen encoder must stay in eval)."""
    modes = [(m, m.training) for m in model.modules()]
    try:
        with torch.inference_mode():
            yield
    finally:
        for module, mode in modes:
            module.training = mode


def panel_vectors(model: NERTagger, sample: Sample) -> tuple[list[str], list[np.ndarray], list]:
    """Panel names, each panel's word vectors `[words, dim]` (every hidden state, then the
    combiner's output) and the model's predicted IOB2 tag for each sampled word."""
    with kept_modes(model):
        words = WordStates.of_tagger(model)
        states = list(iter_word_states(words, sample.sentences, with_combiner=True))
        tagged = list(iter_tags(model, sample.sentences))
    layers = np.stack([states[s][0][w] for s, w in sample.picks])  # [words, L+1, hidden]
    mixed = np.stack([states[s][1][w] for s, w in sample.picks])  # [words, dim]
    names = ["embeddings"] + [f"layer {k}" for k in range(1, layers.shape[1])] + ["combiner"]
    panels = [layers[:, k] for k in range(layers.shape[1])] + [mixed]
    return names, panels, [tagged[s][0][w] for s, w in sample.picks]


def project(vectors: np.ndarray, method: str = "pca", seed: int = 0) -> np.ndarray:
    """`[words, dim]` -> `[words, 2]` by PCA or t-SNE (t-SNE needs 5 words; fewer: PCA)."""
    if method not in METHODS:
        raise NERError(f"must be one of {', '.join(METHODS)}, not {method!r}", path="method")
    points = np.asarray(vectors, dtype=np.float64)
    if method == "tsne" and len(points) >= 5:
        from sklearn.manifold import TSNE

        perplexity = min(30.0, (len(points) - 1) / 3)
        tsne = TSNE(2, perplexity=perplexity, init="pca", random_state=seed)
        return tsne.fit_transform(points).astype(np.float64)  # float32 out: align in float64
    from sklearn.decomposition import PCA

    components = min(2, *points.shape)
    if components == 0:
        return np.zeros((len(points), 2))
    flat = PCA(components, svd_solver="full").fit_transform(points)  # [words, components]
    return np.pad(flat, ((0, 0), (0, 2 - components)))  # [words, 2]


def align(points: np.ndarray, reference: np.ndarray | None) -> np.ndarray:
    """`points` centred and rotated/reflected (no scaling) onto the centred `reference`
    (orthogonal Procrustes); no reference: only centred."""
    centred = points - points.mean(axis=0)
    if reference is None:
        return centred
    from scipy.linalg import orthogonal_procrustes

    rotation, _ = orthogonal_procrustes(centred, reference - reference.mean(axis=0))
    return centred @ rotation


def separation(vectors: np.ndarray, gold: Sequence[str]) -> float:
    """Silhouette score of the gold types in `vectors`' own space; NaN when undefined."""
    from sklearn.metrics import silhouette_score

    types = [entity_type(t) for t in gold]
    if not 2 <= len(set(types)) <= len(types) - 1:
        return float("nan")
    return float(silhouette_score(np.asarray(vectors, dtype=np.float64), types))


@dataclass
class Frame:
    """One sample's picture at one moment: 2-D points per panel and what colours them."""

    names: list[str]
    coords: np.ndarray  # [panels, words, 2], aligned
    scores: np.ndarray  # [panels] silhouette by gold type
    words: list[str]
    gold: list[str]
    predicted: list[str]
    vectors: list[np.ndarray] = field(default_factory=list)  # per panel [words, dim], unprojected


def make_frame(
    model: NERTagger, sample: Sample, method: str, seed: int, previous: Frame | None = None
) -> Frame:
    """The sample's frame under `model`, each panel aligned to the same panel of `previous`."""
    names, panels, predicted = panel_vectors(model, sample)
    gold = sample.gold
    coords = [
        align(project(v, method, seed), None if previous is None else previous.coords[i])
        for i, v in enumerate(panels)
    ]
    scores = np.array([separation(v, gold) for v in panels])
    return Frame(names, np.stack(coords), scores, sample.words, gold, predicted, panels)


def write_frame(directory: Path, stem: str, frames: dict[str, Frame], title: str, dpi: int):
    """`STEM.png` (a row a sample, a panel a hidden state plus the combiner) and `STEM.npz`
    (per sample `ROW_coords [panels, words, 2]`, `_scores`, `_words`, `_gold`, `_predicted`;
    and `panels`), each written whole. Returns the figure: its axes are the panels."""
    fig = plot_grid(frames, title)
    save_figure(fig, directory / f"{stem}.png", dpi)
    arrays: dict[str, Any] = {"panels": np.array(next(iter(frames.values())).names)}
    for row, frame in frames.items():
        arrays |= {
            f"{row}_coords": frame.coords,
            f"{row}_scores": frame.scores,
            f"{row}_words": np.array(frame.words),
            f"{row}_gold": np.array(frame.gold),
            f"{row}_predicted": np.array(frame.predicted),
        }
    with atomic_write(directory / f"{stem}.npz", binary=True) as out:
        np.savez(out, **arrays)
    return fig


class LayerProjection(Callback):
    """At the end of each validation epoch (not the sanity check), the 2-D picture of every
    hidden state and of the combiner's output for a fixed sample of dev (and train) words:
    `epoch-XX.png`, `epoch-XX.npz`, `layers.gif`, `scalar-mix.png` (a combiner with weights), and
    the silhouette scores logged as `projection/ROW/PANEL`. With a TensorBoardLogger, also the
    pictures as images and the word vectors in the embedding projector
    (`ner.layer_analysis.tensorboard.log_frames`). Only rank 0 computes and writes."""

    def __init__(
        self,
        output_dir: str | None = None,
        sample_per_type: int = 50,
        include_train: bool = False,
        method: str = "pca",
        seed: int = 0,
        dpi: int = 72,
        projector: bool = True,
    ):
        """Args:
        output_dir: where the pictures go (default: `<trainer.log_dir or runs>/projection`).
        sample_per_type: words of each gold type at most (`O` is a type), drawn once.
        include_train: also a sample of train words (fitting beside generalisation).
        method: `pca` or `tsne` (slower; its layout is less stable between epochs).
        seed: of the word sample and of t-SNE.
        dpi: of the PNGs and so of the GIF (small by default).
        projector: with a TensorBoardLogger, the word vectors of every panel in TensorBoard's
            embedding projector each epoch (word, gold and predicted tag as metadata).
        """
        require("analysis", "the LayerProjection callback")
        if method not in METHODS:
            raise NERError(f"must be one of {', '.join(METHODS)}, not {method!r}", path="method")
        if sample_per_type < 1:
            raise NERError(f"must be at least 1, got {sample_per_type}", path="sample_per_type")
        self.output_dir, self.sample_per_type = output_dir, sample_per_type
        self.include_train, self.method, self.seed, self.dpi = include_train, method, seed, dpi
        self.projector = projector
        self.directory: Path | None = None
        self.samples: dict[str, Sample] = {}
        self.previous: dict[str, Frame] = {}
        self.pngs: dict[int, Path] = {}
        self.mix: dict[int, list[float]] = {}

    def setup(self, trainer, pl_module, stage: str) -> None:
        # trainer.log_dir broadcasts from rank 0: every rank must ask for it
        root = self.output_dir or Path(trainer.log_dir or "runs") / "projection"
        if trainer.is_global_zero:
            self.directory = writable_folder(root)  # a bad folder fails before training starts

    def _sample(self, trainer, split: str) -> Sample:
        if split not in self.samples:  # drawn once: the same words every epoch
            sentences = trainer.datamodule.sentences(split)
            self.samples[split] = stratified_sample(
                sentences, self.sample_per_type, self.seed, split
            )
        return self.samples[split]

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or self.directory is None:
            return
        epoch = trainer.current_epoch
        splits = ["val", "train"] if self.include_train else ["val"]
        frames = {
            split: make_frame(
                pl_module, self._sample(trainer, split), self.method, self.seed,
                self.previous.get(split),
            )
            for split in splits
        }  # fmt: skip
        self.previous = frames
        write_frame(self.directory, f"epoch-{epoch:02d}", frames, f"epoch {epoch}", self.dpi)
        self.pngs[epoch] = self.directory / f"epoch-{epoch:02d}.png"
        write_gif(self.directory / "layers.gif", [self.pngs[e] for e in sorted(self.pngs)])
        self._log(trainer, frames)
        log_frames(writers(trainer), frames, self.pngs[epoch], log_step(trainer), epoch,
                   self.dpi, self.projector)  # fmt: skip
        weights = pl_module.combiner.weights()
        if weights is not None:
            self._plot_mix(pl_module, epoch, weights)

    def _log(self, trainer, frames: dict[str, Frame]) -> None:
        metrics = {
            f"projection/{split}/{panel_tag(name)}": float(score)
            for split, frame in frames.items()
            for name, score in zip(frame.names, frame.scores, strict=True)
            if np.isfinite(score)
        }
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=log_step(trainer))

    def _plot_mix(self, pl_module, epoch: int, weights) -> None:
        self.mix[epoch] = weights.float().cpu().tolist()
        epochs = sorted(self.mix)
        weights = np.array([self.mix[e] for e in epochs])  # [epochs, K]
        layers = pl_module.combiner.layer_indices(pl_module.encoder.config.num_hidden_layers)
        save_figure(plot_mix(epochs, weights, layers), self.directory / "scalar-mix.png", self.dpi)
