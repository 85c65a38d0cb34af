"""`ner probe` and `ner.layer_analysis.probe`: per-layer probes trained on one stored encoding
pass."""

from __future__ import annotations

import csv
import errno
import json
import statistics

import numpy as np
import pytest
import torch
from helpers import one_line_error, run_ner
from PIL import Image

import ner.cli.probe as command
import ner.layer_analysis.probe as probe
import ner.utils.files
from ner.layer_analysis import probe_sweep, probe_tables
from ner.layer_analysis.embed import WordStates
from ner.layer_analysis.probe import ProbeData, collect
from ner.layer_analysis.probe_sweep import TrainConfig, sweep, train_probe
from ner.layer_analysis.probe_tables import best_layer
from ner.modules.combiners import SingleLayer
from ner.modules.heads import LinearHead

LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
PLANTED = 2  # the hidden state that holds the labels


def random_tags(rng: np.random.Generator, n: int) -> list[list[str]]:
    """`n` sentences of valid IOB2 tags: runs of O and one- or two-word entities."""
    sentences = []
    for _ in range(n):
        tags: list[str] = []
        while len(tags) < 8:
            kind = rng.choice(["O", "LOC", "PER"])
            if kind == "O":
                tags += ["O"] * int(rng.integers(1, 3))
            else:
                tags += [f"B-{kind}"] + [f"I-{kind}"] * int(rng.integers(0, 2))
        sentences.append(tags)
    return sentences


def planted_states(
    rng: np.random.Generator, tags: list[list[str]], noise: float = 1.0
) -> list[np.ndarray]:
    """Per sentence `[words, 5, 8]` noise; state PLANTED also holds its label one-hot (x4)."""
    out = []
    for sentence in tags:
        states = (noise * rng.normal(size=(len(sentence), 5, 8))).astype(np.float32)
        for w, tag in enumerate(sentence):
            states[w, PLANTED, LABELS.index(tag)] += 4.0
        out.append(states)
    return out


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])  # float16 storage holds all of them
def test_a_probe_reaches_the_optimum_whatever_the_feature_scale(scale):
    """Regression: Adam for a fixed number of epochs on unscaled features underfit the states
    whose scale differs (the last MiniLM layer scored 14 points below a converged probe). The
    label one-hot (x4) planted in state 2 under noise of spread 0.5 is separable: the oracle
    (each word's largest planted feature) scores dev F1 1.0, the known optimum. Every scale
    reaches it with one learning rate, and stops once dev F1 stops improving."""
    rng = np.random.default_rng(0)
    train, dev = random_tags(rng, 60), random_tags(rng, 30)
    states = [planted_states(rng, tags, noise=0.5) for tags in (train, dev)]
    oracle = [[LABELS[i] for i in s[:, PLANTED, : len(LABELS)].argmax(1)] for s in states[1]]
    assert oracle == dev  # the optimum is F1 1.0
    for part in states:
        for sentence in part:
            sentence *= scale  # every feature of every state, as a layer's norm would scale it
    data = ProbeData(LABELS, collect(states[0], train, LABELS), collect(states[1], dev, LABELS))
    config = TrainConfig(epochs=100, patience=3, lr=0.05, batch_size=16)
    run = train_probe(lambda: SingleLayer(PLANTED), lambda: LinearHead(dropout=0.0), data, 1,
                      config)  # fmt: skip
    assert run["dev"] == 1.0
    assert run["epochs"] - run["epoch"] == 3 and run["epochs"] < 100  # stopped, not capped


def test_split_pads_sentences_as_by_hand():
    tags = [["O", "B-LOC"], ["B-PER", "I-PER", "O"], ["O"]]
    states = [np.full((len(t), 2, 3), i, np.float32) for i, t in enumerate(tags)]
    split = collect(states, tags, LABELS)
    assert split.states.dtype == torch.float16 and split.states.shape == (6, 2, 3)
    batch, mask, labels = split.batch(torch.tensor([2, 1]))
    assert batch.shape == (2, 3, 2, 3)
    assert mask.tolist() == [[True, False, False], [True, True, True]]
    assert labels.tolist() == [[0, -100, -100], [3, 4, 0]]
    assert batch[1, :, 0, 0].tolist() == [1.0, 1.0, 1.0] and batch[0, 0, 1, 2].item() == 2.0


def test_sweep_ranks_the_planted_hidden_state_first():
    rng = np.random.default_rng(0)
    train, dev = random_tags(rng, 80), random_tags(rng, 40)
    data = ProbeData(
        LABELS, collect(planted_states(rng, train), train, LABELS),
        collect(planted_states(rng, dev), dev, LABELS),
    )  # fmt: skip
    config = TrainConfig(epochs=6, patience=6, lr=0.05, batch_size=16)
    rows = sweep(data, lambda: LinearHead(dropout=0.0), [1, 2], config, progress=False)
    names = [r["name"] for r in rows]
    assert names == ["0", "1", "2", "3", "4", "sum last 4", "mean last 4", "concat last 4",
                     "scalar mix"]  # fmt: skip
    assert best_layer(rows) == PLANTED
    dev = {r["name"]: r["dev"][0] for r in rows}
    assert dev[str(PLANTED)] > 95
    assert all(dev[str(k)] < 60 for k in range(5) if k != PLANTED)
    # the mix, which can see the planted state, learns to weight it most
    weights = rows[-1]["weights"]
    assert len(weights) == 5 and sum(weights) == pytest.approx(1.0)
    assert int(np.argmax(weights)) == PLANTED
    # the summary is the mean and sample std of the seeds' own scores
    runs = rows[PLANTED]["runs"]
    assert rows[PLANTED]["dev"][0] == pytest.approx(statistics.fmean(100 * r["dev"] for r in runs))
    assert "test" not in rows[0]


PLOT_PIXELS = (7 * 120, round(4.5 * 120))  # write_plot's figure: 7 x 4.5 inches at 120 dpi


def drawn(image) -> bool:
    """Whether the picture holds more than a blank page: dark pixels (lines, text, markers)."""
    grey = image.convert("L")
    return sum(grey.histogram()[:128]) > 0.005 * grey.size[0] * grey.size[1]


def count_encoder_calls(monkeypatch) -> dict[str, int]:
    """Counts of `iter_word_states` calls and of the encoder's forward runs in `ner probe`."""
    calls = {"passes": 0, "forward": 0}
    real_of_encoder, real_iter = WordStates.of_encoder.__func__, probe.iter_word_states

    def of_encoder(cls, *args, **kwargs):
        model = real_of_encoder(cls, *args, **kwargs)
        model.encoder.register_forward_hook(
            lambda *a: calls.__setitem__("forward", calls["forward"] + 1)
        )
        return model

    def passes(*args, **kwargs):
        calls["passes"] += 1
        return real_iter(*args, **kwargs)

    monkeypatch.setattr(WordStates, "of_encoder", classmethod(of_encoder))
    monkeypatch.setattr(probe, "iter_word_states", passes)
    return calls


def test_ner_probe_writes_tables_and_plot_from_one_pass(
    tmp_path, tiny_model_dir, tiny_corpus_dir, capsys, monkeypatch
):
    calls = count_encoder_calls(monkeypatch)
    out = tmp_path / "out"
    argv = ["probe", "--encoder", str(tiny_model_dir), "--data-dir", str(tiny_corpus_dir),
            "--test-report", "--seeds", "1", "2", "--epochs", "2", "--output", str(out),
            "--head-args", '{"crf": true}', "--device", "cpu"]  # fmt: skip
    code, stdout, err = run_ner(argv, capsys)
    assert code == 0, err
    # one pass a split (train, dev, test), each a single batch of 20 short sentences
    assert calls == {"passes": 3, "forward": 3}
    lines = list(csv.reader((out / "probe.csv").open()))
    header = ["row", "layer", "layers_computed", "dev_f1_mean", "dev_f1_std", "test_f1_mean"]
    assert lines[0] == [*header, "test_f1_std", "seeds", "best_epochs", "epochs_run"]
    assert [ln[0] for ln in lines[1:]] == ["0", "1", "2", "3", "sum last 4", "mean last 4",
                                           "concat last 4", "scalar mix"]  # fmt: skip
    saved = json.loads((out / "probe.json").read_text())
    assert saved["hidden_states"] == 4 and saved["seeds"] == [1, 2]
    for line, row in zip(lines[1:], saved["rows"], strict=True):
        mean, std = (
            statistics.fmean(100 * r["dev"] for r in row["runs"]),
            statistics.stdev(100 * r["dev"] for r in row["runs"]),
        )
        assert float(line[3]) == pytest.approx(mean, abs=1e-4)
        assert float(line[4]) == pytest.approx(std, abs=1e-4)
        # what a state costs: the encoder layers below it; the last four: all 3
        assert int(line[2]) == (int(line[0]) if line[0].isdigit() else 3)
        assert all(1 <= r["epoch"] <= r["epochs"] <= 2 for r in row["runs"])
    mix = saved["scalar_mix_weights"]
    assert len(mix) == 4 and sum(mix) == pytest.approx(1.0)
    table = (out / "probe.md").read_text()
    assert "| 0 (embeddings) |" in table and "Scalar-mix weights" in table and "test F1" in table
    assert table in stdout
    with Image.open(out / "probe.png") as image:
        assert image.format == "PNG" and image.size == PLOT_PIXELS
        assert drawn(image)
    assert not list(out.glob(".partial-*"))


@pytest.mark.parametrize("case", ["empty train", "a file in the way", "unwritable"])
def test_bad_input_is_one_line_and_writes_nothing(
    case, tmp_path, tiny_model_dir, tiny_corpus_dir, capsys, monkeypatch
):
    train, out = tiny_corpus_dir / "train.txt", tmp_path / "out"
    if case == "empty train":
        train = tmp_path / "empty.txt"
        train.write_text("")
    elif case == "a file in the way":
        (tmp_path / "a-file").write_text("")
        out = tmp_path / "a-file" / "out"
    else:

        def refuses(*args, **kwargs):  # what a folder without write permission answers
            raise PermissionError(errno.EACCES, "Permission denied", str(out))

        monkeypatch.setattr(ner.utils.files.tempfile, "mkstemp", refuses)
    argv = ["probe", "--encoder", str(tiny_model_dir), "--train", str(train), "--dev",
            str(tiny_corpus_dir / "dev.txt"), "--output", str(out)]  # fmt: skip
    line = one_line_error(*run_ner(argv, capsys)[::2])
    expected = {"empty train": f"{train}: no sentences",
                "a file in the way": f"{out}: cannot create output folder (Not a directory)",
                "unwritable": f"{out}: cannot write (Permission denied)"}  # fmt: skip
    assert expected[case] in line
    assert not out.exists()
    left = {"empty train": ["empty.txt"], "a file in the way": ["a-file"], "unwritable": []}
    assert sorted(p.name for p in tmp_path.iterdir()) == left[case]


def test_one_seed_writes_no_spread(tmp_path):
    """Regression: one seed's std was written as 0 (a stable-looking result); now it is empty
    in probe.csv, `± n/a` in probe.md, and the plot draws no error bars."""
    runs = [{"seed": 1, "epoch": 2, "epochs": 3, "dev": 0.75}]
    rows = [probe_sweep.summarize("hidden state 0", 0, runs),
            probe_sweep.summarize("sum", None, runs, cost=4)]  # fmt: skip
    assert rows[0]["dev"] == (75.0, None)
    assert probe_tables.csv_rows(rows)[1] == ["hidden state 0", 0, 0, 75.0, "", "1", "2", "3"]
    assert "75.00 ± n/a" in probe_tables.markdown(rows, "tiny")
    command.write_plot(tmp_path / "probe.png", rows, "tiny")
    with Image.open(tmp_path / "probe.png") as image:
        assert image.size == PLOT_PIXELS and drawn(image)
