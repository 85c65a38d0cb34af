"""TensorBoard for a run: a tiny fit with `configs/logger/tensorboard.yaml` beside the CSV logs,
a scalar mix and the `LayerProjection` callback, read back with TensorBoard's own
`EventAccumulator` and checked against answers worked out apart from the logging: the weights
and dev F1 from the saved checkpoint, the learning rates from the schedule's formula, the word
vectors from the encoder run directly, the pictures from the files the callback wrote."""

from __future__ import annotations

import csv
import re
from io import BytesIO

import numpy as np
import pytest
import torch
from helpers import run_ner
from PIL import Image
from seqeval.metrics import classification_report, f1_score
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2

from ner.cli.lightning import CONFIGS_DIR, cli_for, run_lightning
from ner.corpus.reader import read_conll
from ner.layer_analysis.plots import figure_pixels, plot_weights
from ner.layer_analysis.projection import stratified_sample
from ner.layer_analysis.tensorboard import TensorBoardExtras
from ner.model.tagger import load_tagger

TENSORBOARD = str(CONFIGS_DIR / "logger" / "tensorboard.yaml")
PANELS = ["embeddings", "layer_1", "layer_2", "layer_3", "combiner"]
BASE_LR = {"encoder": 3e-3, "head": 1e-2}
WARMUP = 0.2


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir, tiny_corpus_dir):
    """Eight epochs (validating every fourth) of a scalar mix, CSV and TensorBoard logs, the
    projection callback; fp32 so the dev F1 recomputed below from the checkpoint takes the same
    arithmetic."""
    tmp = tmp_path_factory.mktemp("tensorboard")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp)
        run_lightning(["fit", "-c", str(CONFIGS_DIR / "trainer.yaml"), "--run", "tb",
                       "--model.encoder", str(tiny_model_dir),
                       "--model.combiner", "ner.modules.combiners.ScalarMix",
                       "--model.encoder_lr", str(BASE_LR["encoder"]),
                       "--model.head_lr", str(BASE_LR["head"]),
                       "--model.warmup_ratio", str(WARMUP),
                       "--data.data_dir", str(tiny_corpus_dir), "--data.batch_size", "4",
                       "--trainer.max_epochs", "8", "--trainer.check_val_every_n_epoch", "4",
                       "--trainer.precision", "32-true",
                       "--trainer.log_every_n_steps", "1", "--trainer.enable_progress_bar", "false",
                       f"--trainer.logger+={TENSORBOARD}",
                       "--trainer.callbacks+=ner.layer_analysis.projection.LayerProjection",
                       "--trainer.callbacks.sample_per_type", "3"])  # fmt: skip
    logs = tmp / "runs" / "tb" / "version_0"
    events = EventAccumulator(str(logs), size_guidance={"images": 0, "scalars": 0, "tensors": 0})
    events.Reload()
    return {"tmp": tmp, "logs": logs, "events": events, "ckpt": tmp / "checkpoints" / "tb"}


def scalars(events, tag: str) -> dict[int, float]:
    return {e.step: e.value for e in events.Scalars(tag)}


def pixels(encoded: bytes) -> np.ndarray:
    with Image.open(BytesIO(encoded)) as image:
        return np.asarray(image.convert("RGB"))


def test_both_loggers_write_to_the_runs_folder_with_the_same_scalars(run):
    names = sorted(p.name for p in run["logs"].iterdir() if not p.name.isdigit())
    assert "metrics.csv" in names and any(n.startswith("events.out.tfevents") for n in names)
    with open(run["logs"] / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for tag in ("train/loss", "val/f1", "val/f1_PER", "combiner/weight_0", "lr-AdamW/pg1"):
        from_csv = {int(r["step"]): float(r[tag]) for r in rows if r[tag]}
        from_events = scalars(run["events"], tag)
        assert sorted(from_events) == sorted(from_csv) and from_events
        for step, value in from_csv.items():  # TensorBoard keeps float32
            assert from_events[step] == pytest.approx(value, rel=1e-6), (tag, step)


def test_train_loss_and_learning_rates_every_step_as_the_schedule_says(run):
    events = run["events"]
    steps = sorted(scalars(events, "train/loss"))
    total = len(steps)  # log_every_n_steps 1: one point a step
    assert steps == list(range(total)) and total > 4
    warmup = int(WARMUP * total)

    def expected(base: float, step: int) -> float:  # linear warm-up, then linear decay to 0
        if step < warmup:
            return base * step / warmup
        return base * max(0.0, (total - step) / (total - warmup))

    series = [t for t in events.Tags()["scalars"] if t.startswith("lr-AdamW/")]
    assert len(series) == 4  # encoder and head, each with and without weight decay
    bases = set()
    for tag in series:
        values = scalars(events, tag)
        assert sorted(values) == steps
        base = next(b for b in BASE_LR.values() if values[warmup] == pytest.approx(b))
        bases.add(base)
        for step, value in values.items():
            assert value == pytest.approx(expected(base, step), rel=1e-6, abs=1e-12)
    assert bases == set(BASE_LR.values())


@pytest.fixture(scope="module")
def dev_scores(run, tiny_corpus_dir):
    """seqeval on what `ner test` predicts for dev with the last checkpoint (fp32)."""
    out = run["tmp"] / "dev-test"
    run_lightning(["test", "--ckpt_path", str(run["ckpt"] / "last.ckpt"),
                                "--data.test_file", str(tiny_corpus_dir / "dev.txt"),
                   "--trainer.precision", "32-true", "--output", str(out),
                   "--trainer.enable_progress_bar", "false"])  # fmt: skip
    blocks = (out / "last.test-predictions.txt").read_text().strip().split("\n\n")
    rows = [[line.split() for line in block.splitlines()] for block in blocks]
    gold = [[r[1] for r in sentence] for sentence in rows]
    pred = [[r[2] for r in sentence] for sentence in rows]
    return f1_score(gold, pred), classification_report(gold, pred, output_dict=True)


def test_dev_f1_per_type_is_seqeval_on_the_checkpoint(run, dev_scores):
    events = run["events"]
    last = max(scalars(events, "val/f1"))
    micro, per_type = dev_scores
    assert micro > 0.3  # a model that learned something: agreement means something
    assert scalars(events, "val/f1")[last] == pytest.approx(micro, abs=1e-6)
    for kind in ("LOC", "ORG", "PER"):
        f1 = per_type[kind]["f1-score"]
        assert scalars(events, f"val/f1_{kind}")[last] == pytest.approx(f1, abs=1e-6)


def checkpoint_mix(run) -> tuple[np.ndarray, float]:
    state = torch.load(run["ckpt"] / "last.ckpt", weights_only=False)["state_dict"]
    logits = state["combiner.scalar_parameters"].double().numpy()
    return np.exp(logits) / np.exp(logits).sum(), float(state["combiner.gamma"])


def test_combiner_weights_as_scalars_and_a_bar_chart_each_epoch(run):
    events = run["events"]
    validations = sorted(scalars(events, "val/f1"))
    assert len(validations) == 2  # every fourth epoch of 8
    weights, _ = checkpoint_mix(run)
    assert len(weights) == 4  # the embeddings and 3 layers
    for k, weight in enumerate(weights):
        logged = scalars(events, f"combiner/weight_{k}")
        assert sorted(logged) == validations
        assert logged[validations[-1]] == pytest.approx(weight, abs=1e-6)
    bars = events.Images("combiner/weights")
    assert [b.step for b in bars] == validations  # on the scalars' steps
    state = torch.load(run["ckpt"] / "last.ckpt", weights_only=False)["state_dict"]
    mix = torch.softmax(state["combiner.scalar_parameters"], dim=0).tolist()
    drawn = figure_pixels(plot_weights(mix, [0, 1, 2, 3], "ScalarMix weights, epoch 7"), 80)
    np.testing.assert_array_equal(pixels(bars[-1].encoded_image_string), drawn)


def test_chart_layout_puts_every_type_in_the_dev_f1_chart(run):
    [event] = run["events"].Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout.FromString(event.tensor_proto.string_val[0])
    charts = {c.title: list(c.multiline.tag) for cat in layout.category for c in cat.chart}
    regexes = charts["micro, macro and per type"]
    for tag in ("val/f1", "val/macro_f1", "val/f1_LOC", "val/f1_ORG", "val/f1_PER"):
        assert any(re.search(r, tag) for r in regexes), tag
    assert not any(re.search(r, "val/f1_PER_x") for r in regexes)
    scalar_tags = run["events"].Tags()["scalars"]
    weights = [t for t in scalar_tags if re.search(charts["weight of each hidden state"][0], t)]
    assert sorted(weights) == [f"combiner/weight_{k}" for k in range(4)]


def test_projection_pictures_land_as_images(run):
    events = run["events"]
    validations = sorted(scalars(events, "val/f1"))
    grids = events.Images("projection/grid")
    assert [g.step for g in grids] == validations
    pictures = run["logs"] / "projection"
    for epoch, grid in zip((3, 7), grids, strict=True):
        with Image.open(pictures / f"epoch-{epoch:02d}.png") as png:
            np.testing.assert_array_equal(pixels(grid.encoded_image_string), png.convert("RGB"))
    for panel in PANELS:
        shown = events.Images(f"projection/val/{panel}")
        assert [s.step for s in shown] == validations
        assert shown[0].width > 100 and shown[0].height > 100


def reference_vectors(run, tiny_corpus_dir) -> tuple[list[str], dict[str, np.ndarray]]:
    """The sampled dev words and their vectors per panel, from the checkpoint's encoder run on
    each sentence alone (first piece of each word) and its scalar mix worked out in numpy."""
    corpus = read_conll(str(tiny_corpus_dir / "dev.txt"))
    sample = stratified_sample([(s.words, s.tags) for s in corpus.sentences], 3, 0, "val")
    tagger = load_tagger(run["ckpt"] / "last.ckpt")
    per_sentence = []
    for words in sample.sentences:
        pieces = tagger.tokenizer(words, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            out = tagger.encoder(
                input_ids=pieces["input_ids"],
                attention_mask=pieces["attention_mask"],
                output_hidden_states=True,
            )
        ids = pieces.word_ids()
        first = [ids.index(w) for w in range(len(words))]
        per_sentence.append(np.stack([h[0, first].double().numpy() for h in out.hidden_states]))
    states = np.stack([per_sentence[s][:, w] for s, w in sample.picks], axis=1)  # [4, words, H]
    weights, gamma = checkpoint_mix(run)
    panels = {name: states[k] for k, name in enumerate(PANELS[:-1])}
    panels["combiner"] = gamma * np.tensordot(weights, states, axes=1)
    return sample.words, panels


def test_embedding_projector_holds_every_panel_with_word_and_tags(run, tiny_corpus_dir):
    logs = run["logs"]
    validations = sorted(scalars(run["events"], "val/f1"))
    config = (logs / "projector_config.pbtxt").read_text()
    names = re.findall(r'tensor_name: "([^"]+)"', config)
    assert names == [f"val/{p}:{s:05d}" for s in validations for p in PANELS]
    saved = np.load(logs / "projection" / "epoch-07.npz")
    words, expected = reference_vectors(run, tiny_corpus_dir)
    assert list(saved["val_words"]) == words
    last = f"{validations[-1]:05d}"
    for panel in PANELS:
        folder = next(p for p in (logs / last).iterdir() if p.name.lower() == f"val%2f{panel}")
        rows = [r.split("\t") for r in (folder / "metadata.tsv").read_text().splitlines()]
        assert rows[0] == ["word", "gold", "predicted", "correct"]
        gold, predicted = list(saved["val_gold"]), list(saved["val_predicted"])
        assert rows[1:] == [[w, g, p, "yes" if g == p else "no"]
                            for w, g, p in zip(words, gold, predicted, strict=True)]  # fmt: skip
        vectors = np.loadtxt(folder / "tensors.tsv", delimiter="\t")
        # the same fp32 arithmetic batched and padded (the callback) or one sentence alone (here):
        # summation orders differ by kernel and SIMD width (AVX2, AVX-512, AMX), ~1e-6 a value
        np.testing.assert_allclose(vectors, expected[panel], rtol=1e-4, atol=1e-5)


def test_a_missing_tensorboard_is_a_one_line_error(monkeypatch, capsys, tiny_model_dir):
    import ner.utils.extras

    real = ner.utils.extras.find_spec
    monkeypatch.setattr(ner.utils.extras, "find_spec",
                        lambda name: None if name == "tensorboard" else real(name))  # fmt: skip
    code, _, err = run_ner(["fit", "--model.encoder", str(tiny_model_dir),
                            "--trainer.logger", TENSORBOARD], capsys)  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert (
        err.startswith("error: the TensorBoard logger") and "pip install -e '.[tensorboard]'" in err
    )


@pytest.mark.parametrize("how", ["instead", "beside", "in a trainer part"])
def test_the_logger_config_composes(how, tmp_path, tiny_model_dir, tiny_corpus_dir):
    base = ["--model.encoder", str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir),
            "--run", "r"]  # fmt: skip
    if how == "instead":
        args = ["-c", str(CONFIGS_DIR / "trainer.yaml"), "--trainer.logger", TENSORBOARD]
    elif how == "beside":
        args = ["-c", str(CONFIGS_DIR / "trainer.yaml"), f"--trainer.logger+={TENSORBOARD}"]
    else:
        (tmp_path / "logger").mkdir()
        (tmp_path / "logger" / "tensorboard.yaml").write_text(open(TENSORBOARD).read())
        part = tmp_path / "trainer.yaml"
        part.write_text("trainer:\n  max_epochs: 1\n  logger: logger/tensorboard.yaml\n")
        args = ["-c", str(part)]
    trainer = cli_for(args + base).trainer
    kinds = [type(lg).__name__ for lg in trainer.loggers]
    assert kinds == {"instead": ["TensorBoardLogger"], "in a trainer part": ["TensorBoardLogger"],
                     "beside": ["CSVLogger", "TensorBoardLogger"]}[how]  # fmt: skip
    assert {lg.log_dir for lg in trainer.loggers} == {"runs/r/version_0"}
    assert [type(c) for c in trainer.callbacks].count(TensorBoardExtras) == 1
