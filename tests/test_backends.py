"""Inference backends give the fp32 torch path's tags: ONNX Runtime exactly, int8 (ONNX Runtime
and torchao) within a stated tolerance; `ner tag`, `ner test` and `tagger.predict` use them. On
every backend a sentence gets the tags it gets alone, whatever it is batched with."""

from __future__ import annotations

import copy
import json
import random

import numpy as np
import pytest
import torch
from helpers import emissions as emitted
from helpers import run_ner, tiny_sentences

import ner.inference.backends
import ner.utils.errors
from ner.inference.backends import ExportedTagger, accelerate, cached_export
from ner.inference.routine import iter_tags, map_batches
from ner.model.tagger import load_tagger
from ner.utils.precision import cpu_has_fast_bf16

# a fixed set: tiny-corpus sentences plus long ones that need several windows (max_length 24)
FIXED = [[w for w, _ in s] for s in tiny_sentences(40, seed=7)]
FIXED += [FIXED[0] * 6, FIXED[1] * 9, ["acme"] * 40]
# int8 may move emissions a little: the tolerance of these tests (word tags that may differ)
INT8_TAG_AGREEMENT = 0.95
# a 200-word neighbour: many windows, and the longest row of any batch it joins
LONG = [w for s in FIXED for w in s][:200]
# How far a sentence's emissions may move with its batch, as a fraction of their spread. ONNX
# Runtime's fp32 graph gives a row the same bits in any batch (its sums do not regroup with the
# padded length), and the int8 graph quantizes each row on its own: not a bit may move. torch's
# attention kernels round by the batch's padded length: the last bits of fp32 move (more in
# bf16), and under torchao's int8 such a move can tip an activation to the next int8 step.
BATCH_TOLERANCE = {"onnx": 0.0, "onnx-int8": 0.0, "torch": 1e-6, "torch-bf16": 1e-2}
BATCH_TOLERANCE["torchao-int8"] = 1e-3


def emissions(model, sentences):
    """Each sentence's emissions `[words, labels]`, in fp32, through the inference routine."""
    return [e.numpy() for e in map_batches(model, emitted(model), sentences, bf16=False)]


def tags(model, sentences):
    return [t for t, _ in iter_tags(model, sentences, bf16=False)]


@pytest.fixture(scope="module")
def ckpt(context_run, tmp_path_factory):
    """The tiny context checkpoint with a random, decisive classifier: after 12 training steps it
    tags everything O, which would make agreement trivial; this one tags every label."""
    state = torch.load(context_run["ckpt"], map_location="cpu", weights_only=True)
    weight = state["state_dict"]["head.classifier.weight"]
    generator = torch.Generator().manual_seed(0)
    state["state_dict"]["head.classifier.weight"] = 4 * torch.randn(
        weight.shape, generator=generator
    )
    path = tmp_path_factory.mktemp("random-head") / "random.ckpt"
    torch.save(state, path)
    return path


@pytest.fixture(scope="module")
def models(ckpt, tmp_path_factory):
    """fp32 torch, onnx fp32, onnx int8 and torchao int8 taggers of one tiny checkpoint."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    out = {"torch": load_tagger(ckpt)}
    out["onnx"] = accelerate(load_tagger(ckpt), "onnx", None, cache)
    out["onnx-int8"] = accelerate(load_tagger(ckpt), "onnx", "int8", cache)
    out["torchao-int8"] = accelerate(copy.deepcopy(out["torch"]), "torch", "int8")
    return out


def test_the_fixed_set_has_sentences_of_several_windows(models):
    assert models["torch"].window_settings.max_length == 24
    tokenizer = models["torch"].tokenizer
    pieces = [len(tokenizer(x, is_split_into_words=True)["input_ids"]) for x in FIXED]
    assert sum(n > 24 for n in pieces) == 3


def test_onnx_gives_the_torch_emissions_and_exactly_its_tags(models):
    pairs = zip(emissions(models["onnx"], FIXED), emissions(models["torch"], FIXED), strict=True)
    for got, want in pairs:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)  # float32 sums, reordered
    assert tags(models["onnx"], FIXED) == tags(models["torch"], FIXED)


@pytest.mark.parametrize("name", ["onnx-int8", "torchao-int8"])
def test_int8_stays_within_the_stated_tolerance(models, name):
    want = np.concatenate(emissions(models["torch"], FIXED))
    got = np.concatenate(emissions(models[name], FIXED))
    assert not np.allclose(got, want, atol=1e-6)  # it did run in int8
    spread = want.max() - want.min()
    assert np.abs(got - want).max() < 0.1 * spread
    flat = [t for s in tags(models[name], FIXED) for t in s]
    ref = [t for s in tags(models["torch"], FIXED) for t in s]
    assert np.mean([a == b for a, b in zip(flat, ref, strict=True)]) >= INT8_TAG_AGREEMENT


def tagged(model, sentences, batch_size, bf16=False):
    """Each sentence's (emissions, tags) through the inference routine, `batch_size` a batch."""

    def run(batch):
        out = model(batch).float()
        tags, _ = model.head.decode(out, batch["word_mask"])
        n = batch["word_mask"].sum(1).tolist()
        return [(e[:k].numpy(), t[:k]) for e, t, k in zip(out, tags.tolist(), n, strict=True)]

    return list(map_batches(model, run, sentences, batch_size=batch_size, bf16=bf16))


@pytest.mark.parametrize("name", ["torch", "torch-bf16", "onnx", "onnx-int8", "torchao-int8"])
def test_a_sentence_is_tagged_as_alone_whatever_it_is_batched_with(models, name):
    """What a sentence gets must not depend on its batch mates, their order or their length:
    one call a sentence is the reference; all in one call (batches of 1, 7, 64), shuffled and
    with long neighbours (batches of 7, 64; in batches of 1 those are the first case again) give
    the same tags, and on ONNX Runtime the same emissions, bit for bit."""
    bf16 = name == "torch-bf16"
    # bf16 is forced where the CPU lacks it natively (emulated: slow, but the model is tiny), so
    # the case runs on every CPU, as CI requires
    model = models[name.removesuffix("-bf16")]
    alone = [tagged(model, [sentence], 1, bf16)[0] for sentence in FIXED]
    order = random.Random(0).sample(range(len(FIXED)), len(FIXED))
    mixed = [x for i, s in enumerate(FIXED) for x in ([s, LONG] if i % 4 == 0 else [s])]
    runs = {"all, batches of 1": tagged(model, FIXED, 1, bf16)}
    for size in (7, 64):
        runs[f"all, batches of {size}"] = tagged(model, FIXED, size, bf16)
        shuffled = tagged(model, [FIXED[i] for i in order], size, bf16)
        runs[f"shuffled, batches of {size}"] = [shuffled[order.index(i)] for i in range(len(FIXED))]
        got = tagged(model, mixed, size, bf16)
        runs[f"with long neighbours, batches of {size}"] = [
            r for x, r in zip(mixed, got, strict=True) if x is not LONG
        ]
    spread = np.ptp(np.concatenate([e for e, _ in alone]))
    for how, got in runs.items():
        assert [t for _, t in got] == [t for _, t in alone], how
        for (emitted_here, _), (emitted_alone, _) in zip(got, alone, strict=True):
            np.testing.assert_allclose(
                emitted_here,
                emitted_alone,
                rtol=0,
                atol=BATCH_TOLERANCE[name] * spread,
                err_msg=how,
            )


def test_tagger_predict_runs_on_the_attached_backend(models):
    texts = [" ".join(words) for words in FIXED[:10]]
    got, want = models["onnx"].predict(texts), models["torch"].predict(texts)
    assert sum(map(len, want)) >= 10
    assert [[(e["start"], e["end"], e["label"]) for e in s] for s in got] == [
        [(e["start"], e["end"], e["label"]) for e in s] for s in want
    ]
    scores = [[e["score"] for e in s] for s in got], [[e["score"] for e in s] for s in want]
    assert sum(scores[0], []) == pytest.approx(sum(scores[1], []), abs=1e-5)
    assert models["onnx"].runtime is not None and models["torch"].runtime is None


def test_an_export_is_made_once_and_then_found(ckpt, tmp_path, monkeypatch):
    model = load_tagger(ckpt)
    first = cached_export(model, tmp_path)

    def no_second_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(ner.inference.backends, "export_onnx", no_second_export)
    assert cached_export(load_tagger(ckpt), tmp_path) == first
    model.head.classifier.bias.data += 1.0  # other weights: another export
    with pytest.raises(AssertionError, match="exported again"):
        cached_export(model, tmp_path)


def test_ner_tag_backends_and_an_export_folder_agree(ckpt, tmp_path, capsys):
    ckpt = str(ckpt)
    text = tmp_path / "in.txt"
    text.write_text("\n\n".join(" ".join(words) for words in FIXED[:10]) + "\n")
    code, plain, err = run_ner(["tag", ckpt, str(text), "--format", "conll"], capsys)
    assert code == 0 and plain.count("B-") >= 10, err
    code, onnx, err = run_ner(
        ["tag", ckpt, str(text), "--format", "conll", "--backend", "onnx"], capsys
    )
    assert code == 0 and onnx == plain, err
    assert run_ner(["export", ckpt, str(tmp_path / "exp")], capsys)[0] == 0
    code, folder, err = run_ner(
        ["tag", str(tmp_path / "exp"), str(text), "--format", "conll"], capsys
    )
    assert code == 0 and folder == plain, err


def test_ner_test_on_onnx_reports_the_torch_scores(ckpt, context_run, tmp_path, capsys):
    ckpt, corpus = str(ckpt), context_run["corpus"]
    reports = {}
    for backend in ("torch", "onnx"):
        out = tmp_path / backend
        args = ["test", "--ckpt_path", ckpt, "--data.test_file", str(corpus / "test.txt")]
        code, _, err = run_ner([*args, "--backend", backend, "--output", str(out)], capsys)
        assert code == 0, err
        report = json.loads(next(out.glob("*.json")).read_text())["metrics"]
        tagged = sorted(p for p in out.iterdir() if p.suffix != ".json")
        reports[backend] = report, [p.read_text() for p in tagged]
    assert reports["onnx"][0] == pytest.approx(reports["torch"][0])
    assert reports["onnx"][1] == reports["torch"][1] and "B-" in reports["torch"][1][0]


def test_backend_errors_are_one_line(context_run, tmp_path, capsys):
    ckpt = str(context_run["ckpt"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "ner.json").write_text("{not json")
    cases = [
        (["tag", str(bad), "-"], f"{bad / 'ner.json'}: not an ONNX export"),
        (
            ["fit", "-c", str(context_run["tmp"] / "fit.yaml"), "--backend", "onnx"],
            "unrecognized arguments: --backend onnx",
        ),
    ]
    if not torch.cuda.is_available():
        cases.append((["tag", ckpt, "--backend", "onnx", "--device", "cuda"], "error:"))
    for args, message in cases:
        code, _, err = run_ner(args, capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_an_export_folder_without_int8_says_so(context_run, tmp_path, capsys):
    assert (
        run_ner(["export", str(context_run["ckpt"]), str(tmp_path / "e"), "--no-int8"], capsys)[0]
        == 0
    )
    with pytest.raises(ner.utils.errors.NERError, match="this export has no int8 model"):
        ExportedTagger(tmp_path / "e", "int8")


@pytest.mark.integration
def test_the_invariance_benchmark_smoke(ckpt, conll_dir, tmp_path, capsys):
    """`benchmarks.invariance --smoke` tags a few eng.testb sentences three ways on every backend
    this CPU runs and finds no sentence whose entities move with its batch."""
    from benchmarks import invariance
    from benchmarks.common import parse_table

    out = tmp_path / "record.json"
    invariance.main(["--smoke", "--ckpt", str(ckpt), "--out", str(out)])
    record = json.loads(out.read_text(encoding="utf-8"))
    backends = [b for b in invariance.BACKENDS if "bf16" not in b or cpu_has_fast_bf16()]
    cases = [(b, m) for b in backends for m in invariance.MODES]
    assert [(r["backend"], r["mode"]) for r in record["rows"]] == cases
    assert {r["sentences"] for r in record["rows"]} == {invariance.SMOKE_SENTENCES}
    assert [r["differ from alone"] for r in record["rows"]] == [0] * len(cases)
    assert [r["vs torch fp32"] for r in record["rows"][:3]] == [0, 0, 0]  # torch fp32 itself
    assert all(r["seconds"] > 0 for r in record["rows"])
    assert record["versions"]["onnxruntime"] and record["ckpt"] == str(ckpt)
    assert record["headline"]["ours"] == 0 and record["command"].startswith("ner bench invariance")
    headers, rows = parse_table(capsys.readouterr().out)  # the printed table is the record's
    assert headers == invariance.HEADERS and len(rows) == len(cases)
