"""The benchmarks in smoke mode: each prints its table with the expected rows and positive figures.

No timing threshold: figures on a shared 2-core machine say nothing about correctness. A tiny
random BERT stands in for MiniLM so each run takes seconds; the code path is the same.
"""

from __future__ import annotations

import json
import re

import pytest
from helpers import build_tiny_bert
from seqeval.metrics import f1_score

from benchmarks import consistency, encoder, epoch, frozen, predict, stream, train
from benchmarks.common import parse_table
from ner.corpus.reader import read_conll
from ner.corpus.schemes import is_valid_iob2

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    """A tiny random BertModel with 512 positions (CoNLL words split into many tiny pieces)."""
    # model_max_length 512: the HF recipe truncates to it
    directory = tmp_path_factory.mktemp("tiny-bert-512")
    return str(build_tiny_bert(directory, 2, max_positions=512, model_max_length=512))


def run_smoke(
    module, capsys, tmp_path, encoder, labels: list[str], headers: list[str], extra=()
) -> dict:
    """Run `module` with --smoke; check the table's first column and that numbers are > 0."""
    out = tmp_path / "figures.json"
    module.main(["--smoke", "--json", str(out), "--encoder", encoder, *extra])
    table_headers, rows = parse_table(capsys.readouterr().out)
    assert table_headers == headers
    assert [row[0] for row in rows] == labels
    for row in rows:
        for cell in row[1:]:
            if re.fullmatch(r"[\d,.]+(e[-+]?\d+)?", cell):
                assert float(cell.replace(",", "")) > 0, row
    data = json.loads(out.read_text(encoding="utf-8"))
    assert len(data["rows"]) == len(rows)
    # the record: the `ner bench` command, a headline with figures of the table
    assert data["command"].startswith(f"ner bench {module.__name__.rpartition('.')[2]} --smoke")
    assert data["headline"]["ours"] > 0 and data["headline"]["anchor"] > 0
    return data


def test_train_smoke(tiny_encoder, conll_dir, capsys, tmp_path):
    headers = ["recipe", "steps", "real pieces", "real/padded", "seconds", "pieces/s"]
    headers += ["vs HF Trainer, fp32", "vs HF Trainer, bf16"]
    labels = ["ours, bf16 autocast", "ours, fp32", "HF Trainer, fp32", "HF Trainer, bf16"]
    data = run_smoke(train, capsys, tmp_path, tiny_encoder, labels, headers)
    hf32, hf16 = data["rows"][2], data["rows"][3]
    assert hf32["vs HF Trainer, fp32"] == pytest.approx(1.0)
    assert hf16["vs HF Trainer, bf16"] == pytest.approx(1.0)
    # the ratio columns are the pieces/s quotients
    ratio = hf16["pieces/s"] / hf32["pieces/s"]
    assert hf16["vs HF Trainer, fp32"] == pytest.approx(ratio, rel=1e-3)
    # both recipes train on the same sentences: ours' fp32 run sees every one of them
    assert data["rows"][1]["steps"] == 1 and hf32["steps"] == 2 and hf16["steps"] == 2


def test_predict_smoke(tiny_encoder, conll_dir, capsys, tmp_path):
    headers = ["side", "sentences", "seconds", "sentences/s", "vs HF", "2nd pass sentences/s"]
    headers += ["2nd pass vs HF", "peak RSS MiB", "vs HF RSS"]
    data = run_smoke(predict, capsys, tmp_path, tiny_encoder, list(predict.SIDES), headers)
    assert [r["sentences"] for r in data["rows"]] == [8] * len(predict.SIDES)
    entities = {r["side"]: r["entities"] for r in data["raw"]}
    assert entities["ours, onnx fp32"] == entities["ours, fp32"]  # the same tags, another engine


def test_predict_documents_smoke(tiny_encoder, conll_dir, capsys, tmp_path):
    """eng.testb as documents: ours tags word lists with their document ids and context."""
    headers = ["side", "sentences", "seconds", "sentences/s", "vs HF", "2nd pass sentences/s"]
    headers += ["2nd pass vs HF", "peak RSS MiB", "vs HF RSS"]
    extra = ["--documents", "--context", "8"]
    data = run_smoke(predict, capsys, tmp_path, tiny_encoder, list(predict.SIDES), headers, extra)
    assert [r["sentences"] for r in data["rows"]] == [8] * len(predict.SIDES)
    assert any("as CoNLL documents (1 documents; ours with 8 context" in n for n in data["notes"])
    texts, doc_ids = predict.inputs(True, 8)
    assert (
        doc_ids == [0] * 8
        and texts[0] == read_conll(str(conll_dir / "eng.testb")).sentences[0].words
    )


def test_encoder_smoke(tiny_encoder, capsys, tmp_path):
    headers = ["precision", "batch x pieces", "GFLOP", "ms", "achieved GFLOP/s",
               "FFN matmul GFLOP/s", "peak GFLOP/s", "fraction of peak"]  # fmt: skip
    data = run_smoke(encoder, capsys, tmp_path, tiny_encoder, ["bf16 autocast", "fp32"], headers)
    # 4 x 16 pieces: 2 layers x (2 * 64 * (4 * 16^2 + 2 * 16 * 32) + 4 * 4 * 16^2 * 16)
    assert data["rows"][0]["GFLOP"] == pytest.approx(2 * (2 * 64 * 2048 + 65536) / 1e9)


def test_stream_smoke(tiny_encoder, conll_dir, capsys, tmp_path):
    headers = ["input", "sentences", "seconds", "sentences/s", "peak RSS MiB", "vs small RSS"]
    data = run_smoke(stream, capsys, tmp_path, tiny_encoder, list(stream.SIZES), headers)
    assert [r["sentences"] for r in data["rows"]] == [50, 200, 500]
    # every sentence came back as a record, from its own `ner tag` process
    assert [r["records"] for r in data["raw"].values()] == [50, 200, 500]
    assert data["rows"][0]["vs small RSS"] == pytest.approx(1.0)


def test_flop_count_matches_the_formula():
    from types import SimpleNamespace

    config = SimpleNamespace(hidden_size=8, intermediate_size=16, num_hidden_layers=2)
    per_layer = 2 * 6 * (4 * 64 + 2 * 8 * 16) + 4 * 2 * 3 * 3 * 8
    assert encoder.encoder_flops(config, batch=2, seq=3) == 2 * per_layer


def test_frozen_smoke(tiny_encoder, conll_dir, capsys, tmp_path):
    labels = [
        "re-encoding every epoch",
        "filling the cache (once)",
        "epoch from the cache (best of 2)",
    ]
    data = run_smoke(frozen, capsys, tmp_path, tiny_encoder, labels, frozen.HEADERS)
    rows = data["rows"]
    assert rows[0]["vs re-encoding"] == pytest.approx(1.0)
    # the same first step on both sides, up to the float16 rounding of the features
    assert rows[2]["first loss"] == pytest.approx(rows[0]["first loss"], rel=1e-3)


def test_hf_recipe_smoke(tiny_encoder, tmp_path, conll_dir):
    from benchmarks import hf_recipe

    hf_recipe.main(["--smoke", "--seeds", "3", "--out", str(tmp_path), "--encoder", tiny_encoder])
    result = json.loads((tmp_path / "seed-3.json").read_text())
    assert result["seed"] == 3 and result["fit_s"] > 0
    for split, name in (("dev", "testa"), ("test", "testb")):
        scores = result[split]
        blocks = (tmp_path / f"seed-3.{split}.txt").read_text().strip().split("\n\n")
        rows = [[line.split() for line in block.splitlines()] for block in blocks]
        gold = [[r[1] for r in rows_] for rows_ in rows]
        pred = [[r[2] for r in rows_] for rows_ in rows]
        # the 40 first sentences of the split, scored as seqeval scores them
        expected = read_conll(str(conll_dir / f"eng.{name}")).sentences[:40]
        assert gold == [s.tags for s in expected]
        assert scores["f1"] == f1_score(gold, pred)
        for kind in ("LOC", "MISC", "ORG", "PER"):
            entities = sum(t == f"B-{kind}" for tags in gold for t in tags)
            assert scores[f"support_{kind}"] == entities


def test_epoch_smoke(tiny_encoder, conll_dir, capsys, tmp_path):
    headers = ["recipe", "precision", "steps", "words", "pieces computed", "seconds"]
    headers += ["sentences/s", "vs HF Trainer, fp32", "vs HF Trainer, bf16"]
    labels = ["ours, default (context 32)", "ours, no context", "ours, packed (experiment packed)"]
    labels += ["HF Trainer, fp32", "HF Trainer, bf16"]
    data = run_smoke(epoch, capsys, tmp_path, tiny_encoder, labels, headers)
    rows = {r["recipe"]: r for r in data["rows"]}
    # every side trains one epoch on the same words: the first whole documents past 40 sentences
    assert len({r["words"] for r in rows.values()}) == 1
    assert any("eng.train sentences (whole documents)" in note for note in data["notes"])
    # document context makes ours compute more pieces for the same sentences
    ctx, flat = rows["ours, default (context 32)"], rows["ours, no context"]
    assert ctx["pieces computed"] > rows["ours, packed (experiment packed)"]["pieces computed"]
    assert ctx["pieces computed"] > flat["pieces computed"]
    assert rows["HF Trainer, fp32"]["vs HF Trainer, fp32"] == pytest.approx(1.0)


def test_noisy_corpus_is_small_noisy_typed_anew_and_reproducible(conll_dir, tmp_path):
    from benchmarks import noisy_corpus

    sizes = {"train": ("train", 300), "dev": ("testa", 50), "test": ("testb", 50)}
    assert noisy_corpus.build(tmp_path / "a", sizes) == {"train": 300, "dev": 50, "test": 50}
    noisy_corpus.build(tmp_path / "b", sizes)
    for name in sizes:
        text = (tmp_path / "a" / f"{name}.txt").read_text()
        assert text == (tmp_path / "b" / f"{name}.txt").read_text()  # seeded: the same files
        assert "-DOCSTART-" not in text
        corpus = read_conll(str(tmp_path / "a" / f"{name}.txt"))
        assert corpus.scheme == "IOB2" and len(corpus.documents) == 1
        assert all(is_valid_iob2(s.tags) for s in corpus.sentences)
    sentences = read_conll(str(tmp_path / "a" / "train.txt")).sentences
    types = {t[2:] for s in sentences for t in s.tags if t != "O"}
    assert types == {"person", "location", "group", "nationality", "other"}
    words = [w for s in sentences for w in s.words]
    assert any(w.startswith("@user") for w in words) and any(w.startswith("#") for w in words)
    assert any(w.startswith("https://t.co/") for w in words)
    lowered = [s for s in sentences if all(w == w.lower() for w in s.words)]
    assert 0.2 < len(lowered) / len(sentences) < 0.5  # a third lowercased, and a few all-lower


def test_noisy_corpus_retypes_by_the_rule_of_its_docstring():
    from benchmarks.noisy_corpus import retype

    words = ["German", "officials", "met", "Bayern", "Munich", "at", "the", "World", "Cup", "."]
    tags = ["B-MISC", "O", "O", "B-ORG", "I-ORG", "O", "O", "B-MISC", "I-MISC", "O"]
    assert retype(words, tags) == ["B-nationality", "O", "O", "B-group", "I-group", "O", "O",
                                   "B-other", "I-other", "O"]  # fmt: skip
    assert retype(["Olympics", "Kurdish", "Tim"], ["B-MISC", "B-MISC", "B-PER"]) == [
        "B-other", "B-nationality", "B-person"]  # fmt: skip


def test_hf_recipe_on_another_corpus_in_bf16(tiny_encoder, tmp_path, conll_dir):
    from benchmarks import hf_recipe, noisy_corpus

    sizes = {"train": ("train", 40), "dev": ("testa", 40), "test": ("testb", 40)}
    noisy_corpus.build(tmp_path / "data", sizes)
    argv = ["--smoke", "--seeds", "2", "--out", str(tmp_path / "out"), "--encoder", tiny_encoder,
            "--data-dir", str(tmp_path / "data"), "--lr", "1e-4", "--bf16"]  # fmt: skip
    hf_recipe.main(argv)
    result = json.loads((tmp_path / "out" / "seed-2.json").read_text())
    assert result["lr"] == 1e-4 and result["bf16"] is True
    assert result["data_dir"] == str(tmp_path / "data")
    rows = (tmp_path / "out" / "seed-2.dev.txt").read_text().strip().split("\n\n")
    gold = [[line.split()[1] for line in block.splitlines()] for block in rows]
    pred = [[line.split()[2] for line in block.splitlines()] for block in rows]
    assert gold == [s.tags for s in read_conll(str(tmp_path / "data" / "dev.txt")).sentences]
    assert result["dev"]["f1"] == f1_score(gold, pred)
    assert {k for k in result["dev"] if k.startswith("f1_")} <= {
        f"f1_{t}" for t in ("group", "location", "nationality", "other", "person")
    }


def test_consistency_smoke(tiny_encoder, conll_dir, capsys, tmp_path):
    headers = ["side", "seconds", "sentences/s", "ratio"]
    labels = ["plain (per batch)", "consistency 1 (per document)"]
    data = run_smoke(consistency, capsys, tmp_path, tiny_encoder, labels, headers)
    assert data["rows"][0]["ratio"] == 1.0
    sides = [row["sentences/s"] * row["seconds"] for row in data["rows"]]
    assert sides == pytest.approx([120, 120])  # both sides tagged the same 120 sentences
