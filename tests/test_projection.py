"""`ner.layer_analysis.projection`: the type-stratified word sample, Procrustes alignment, the
picture files of the `LayerProjection` callback inside a real fit, and `ner project` on its
checkpoint."""

from __future__ import annotations

import csv
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import TINY_ENTITIES, run_ner, tiny_sentences
from PIL import Image

from ner.cli.lightning import CONFIGS_DIR, run_lightning
from ner.corpus.schemes import entity_type
from ner.layer_analysis.projection import (
    LayerProjection,
    align,
    make_frame,
    stratified_sample,
    write_frame,
)
from ner.model.tagger import NERTagger
from ner.utils.errors import NERError

LABELS = ["O"] + [f"{p}-{t}" for t in sorted(TINY_ENTITIES) for p in "BI"]


def labelled(n: int = 20, seed: int = 1) -> list[tuple[list[str], list[str]]]:
    return [([w for w, _ in s], [t for _, t in s]) for s in tiny_sentences(n, seed)]


def test_procrustes_undoes_a_known_rotation_and_reflection():
    rng = np.random.default_rng(3)
    points = rng.normal(size=(40, 2))
    theta = 0.7
    rotation = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    for turn in (rotation, rotation @ np.diag([1.0, -1.0])):  # a rotation; one with a mirror
        moved = points @ turn + np.array([5.0, -3.0])
        np.testing.assert_allclose(align(moved, points), points - points.mean(0), atol=1e-10)
    # no scaling: a twice-as-large copy stays twice as large
    big = align(2 * points @ rotation, points)
    np.testing.assert_allclose(big, 2 * (points - points.mean(0)), atol=1e-10)


def test_stratified_sample_caps_each_type_and_takes_the_same_words_each_time():
    sentences = labelled()
    available = Counter(entity_type(t) for _, tags in sentences for t in tags)
    assert set(available) == {"O", "LOC", "ORG", "PER"} and min(available.values()) > 3
    first = stratified_sample(sentences, 3, seed=7, where="dev")
    again = stratified_sample(sentences, 3, seed=7, where="dev")
    assert (first.picks, first.words) == (again.picks, again.words)
    assert Counter(entity_type(t) for t in first.gold) == dict.fromkeys(available, 3)
    # each pick is the word and tag at that place of the original corpus
    by_words = {tuple(w): t for w, t in sentences}
    for (s, w), word, tag in zip(first.picks, first.words, first.gold, strict=True):
        assert first.sentences[s][w] == word and by_words[tuple(first.sentences[s])][w] == tag
    # a cap above what a type has takes all of it
    everything = stratified_sample(sentences, 10_000, seed=7, where="dev")
    assert Counter(entity_type(t) for t in everything.gold) == available
    with pytest.raises(NERError, match="no words to project"):
        stratified_sample([], 3, seed=7, where="dev")


@pytest.fixture(scope="module")
def tagger(tiny_model_dir):
    return NERTagger(encoder=str(tiny_model_dir), labels=LABELS).train()


@pytest.mark.parametrize("method", ["pca", "tsne"])
def test_unchanged_model_gives_identical_aligned_frames_and_stays_in_train_mode(tagger, method):
    sample = stratified_sample(labelled(), 4, seed=0, where="dev")
    first = make_frame(tagger, sample, method, 0)
    second = make_frame(tagger, sample, method, 0, previous=first)
    assert first.coords.shape == (5, 16, 2)  # 4 hidden states + the combiner, 4 words x 4 types
    np.testing.assert_allclose(second.coords, first.coords, atol=1e-9)
    np.testing.assert_array_equal(second.scores, first.scores)
    np.testing.assert_allclose(first.coords.mean(axis=1), 0.0, atol=1e-9)  # centred
    assert tagger.training and all(m.training for m in tagger.modules())


def test_grid_has_a_panel_per_hidden_state_plus_one(tagger, tmp_path):
    sample = stratified_sample(labelled(), 2, seed=0, where="dev")
    frame = make_frame(tagger, sample, "pca", 0)
    fig = write_frame(tmp_path, "epoch-00", {"val": frame, "train": frame}, "epoch 0", 40)
    assert len(fig.axes) == 2 * (tagger.encoder.config.num_hidden_layers + 2)
    saved = np.load(tmp_path / "epoch-00.npz")
    assert list(saved["panels"]) == ["embeddings", "layer 1", "layer 2", "layer 3", "combiner"]
    np.testing.assert_array_equal(saved["train_coords"], frame.coords)
    assert Image.open(tmp_path / "epoch-00.png").format == "PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-00.npz", "epoch-00.png"]


def test_callback_restores_each_module_mode(tagger, tmp_path):
    callback = LayerProjection(output_dir=str(tmp_path), sample_per_type=2, include_train=True)
    data = SimpleNamespace(sentences=lambda split: labelled())
    trainer = SimpleNamespace(sanity_checking=False, is_global_zero=True, current_epoch=0,
                              global_step=0, datamodule=data, loggers=[], log_dir=None)  # fmt: skip
    callback.setup(trainer, tagger, "fit")
    tagger.head.eval()  # a mixed state: it must come back exactly as it was
    before = [m.training for m in tagger.modules()]
    callback.on_validation_epoch_end(trainer, tagger)
    assert [m.training for m in tagger.modules()] == before
    tagger.train()
    assert Image.open(tmp_path / "layers.gif").n_frames == 1


def count_words(path, cap: int) -> int:
    kinds = Counter(
        entity_type(line.split()[-1])
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("-DOCSTART-")
    )
    return sum(min(cap, n) for n in kinds.values())


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, tiny_model_dir, tiny_corpus_dir):
    """Two epochs with the callback on (and a scalar mix); in a folder of its own."""
    tmp = tmp_path_factory.mktemp("projection-fit")
    out = tmp / "pictures"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp)
        run_lightning(["fit", "-c", str(CONFIGS_DIR / "trainer.yaml"),
                       "--model.encoder", str(tiny_model_dir),
                       "--model.combiner", "ner.modules.combiners.ScalarMix",
                       "--data.data_dir", str(tiny_corpus_dir), "--trainer.max_epochs", "2",
                       "--trainer.callbacks+=ner.layer_analysis.projection.LayerProjection",
                       "--trainer.callbacks.output_dir", str(out),
                       "--trainer.callbacks.sample_per_type", "3",
                       "--trainer.enable_progress_bar", "false"])  # fmt: skip
    return tmp, out


def test_fit_writes_a_frame_per_epoch_a_gif_and_the_mix(fitted, tiny_corpus_dir):
    tmp, out = fitted
    names = sorted(p.name for p in out.iterdir())
    assert names == ["epoch-00.npz", "epoch-00.png", "epoch-01.npz", "epoch-01.png",
                     "layers.gif", "scalar-mix.png"]  # fmt: skip
    with Image.open(out / "layers.gif") as gif:
        assert gif.n_frames == 2
    epochs = [np.load(out / f"epoch-{e:02d}.npz") for e in (0, 1)]
    words = count_words(tiny_corpus_dir / "dev.txt", 3)
    for saved in epochs:
        assert saved["val_coords"].shape == (5, words, 2)
    for key in ("val_words", "val_gold"):  # the same sample both epochs
        np.testing.assert_array_equal(epochs[0][key], epochs[1][key])
    with open(next((tmp / "runs").rglob("metrics.csv")), newline="") as handle:
        rows = list(csv.DictReader(handle))
    logged = [float(r["projection/val/layer_3"]) for r in rows if r["projection/val/layer_3"]]
    assert len(logged) == 2 and all(-1 <= x <= 1 for x in logged)
    np.testing.assert_allclose(logged, [saved["val_scores"][3] for saved in epochs], rtol=1e-6)


def test_ner_project_on_the_fitted_checkpoint(fitted, tiny_corpus_dir, tmp_path, capsys):
    tmp, _ = fitted
    ckpt = tmp / "checkpoints" / "ner" / "last.ckpt"
    dev = tiny_corpus_dir / "dev.txt"
    code, out, err = run_ner(["project", str(ckpt), str(dev), "--output", str(tmp_path / "p"),
                              "--sample", "2", "--dpi", "40"], capsys)  # fmt: skip
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        "projection.npz",
        "projection.png",
    ]
    saved = np.load(tmp_path / "p" / "projection.npz")
    assert saved["input_coords"].shape == (5, count_words(dev, 2), 2)
    assert "projection.png" in out


def test_bad_input_and_output_are_one_line_errors_leaving_nothing(fitted, tmp_path, capsys):
    tmp, _ = fitted
    ckpt = str(tmp / "checkpoints" / "ner" / "last.ckpt")
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    good = tmp_path / "dev.txt"
    good.write_text("john B-PER\nsaid O\n\nparis B-LOC\n", encoding="utf-8")
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    cases = [
        ([str(empty), "--output", str(tmp_path / "o1")], "no sentences"),
        ([str(tmp_path / "missing.txt"), "--output", str(tmp_path / "o2")], "no such file"),
        ([str(good), "--output", str(blocker / "out")], "cannot create output folder"),
    ]
    for args, message in cases:
        code, _, err = run_ner(["project", ckpt, *args], capsys)
        assert code == 2 and err.startswith("error: ") and message in err, err
        assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "dev.txt", "empty.txt"]


def test_callback_refuses_an_unwritable_folder_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    trainer = SimpleNamespace(is_global_zero=True, log_dir=None)
    with pytest.raises(NERError, match="cannot create output folder"):
        LayerProjection(output_dir=str(blocker / "out")).setup(trainer, None, "fit")
    with pytest.raises(NERError, match="pca, tsne"):
        LayerProjection(method="umap")
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]
