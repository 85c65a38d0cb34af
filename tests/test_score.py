"""`ner score`: two different checkpoints and their ensemble on a labelled file, each figure
checked against seqeval on the tags `iter_tags` gives the same model at the same weight."""

from __future__ import annotations

import json

import pytest
from helpers import (
    decisive,
    one_line_error,
    run_ner,
    save_checkpoint,
    tiny_sentences,
    tiny_tagger_batch,
    write_tiny_corpus,
)
from seqeval.metrics import classification_report, f1_score

from ner.corpus.reader import read_conll
from ner.inference.ensemble import Ensemble
from ner.inference.routine import iter_tags
from ner.model.tagger import load_tagger

OWN = {1: 1.0, 2: 0.0}  # each member's own consistency weight, as its checkpoint records it


@pytest.fixture(scope="module")
def members(tiny_model_dir, tmp_path_factory) -> list[str]:
    """Two checkpoints of one recipe with different weights (seeds 1 and 2)."""
    folder = tmp_path_factory.mktemp("score")
    paths = []
    for seed in OWN:
        model = decisive(tiny_tagger_batch(tiny_model_dir, seed)[0], seed)
        model.consistency = OWN[seed]
        paths.append(save_checkpoint(model, folder / f"seed-{seed}.ckpt"))
    return paths


def tags_of(model, corpus, weight: float) -> list[list[str]]:
    words = [s.words for s in corpus.sentences]
    return [t for t, _ in iter_tags(model, words, weight, doc_ids=corpus.doc_ids, bf16=False)]


@pytest.fixture(scope="module")
def dev(members, tmp_path_factory):
    """Three documents whose gold tags are the first member's tags on even sentences and the
    second's on odd ones, so every F1 here lies strictly between 0 and 1."""
    # capitalised words, the ones document consistency reads: many repeat within a document
    sentences = [[(w.capitalize(), "O") for w, _ in s] for s in tiny_sentences(24, seed=3)]
    folder = tmp_path_factory.mktemp("score-dev")
    plain = read_conll(str(write_tiny_corpus(folder / "words.txt", sentences, docs=3)))
    a, b = (tags_of(load_tagger(p), plain, 0.0) for p in members)
    gold = [a[i] if i % 2 == 0 else b[i] for i in range(len(sentences))]
    tagged = [
        [(w, t) for (w, _), t in zip(s, g, strict=True)]
        for s, g in zip(sentences, gold, strict=True)
    ]
    return write_tiny_corpus(folder / "dev.txt", tagged, docs=3)


def expected(model, corpus, weight: float) -> dict[str, float]:
    """seqeval's F1, overall and per type, of `model`'s `iter_tags` at `weight`."""
    gold, pred = [s.tags for s in corpus.sentences], tags_of(model, corpus, weight)
    report = classification_report(gold, pred, output_dict=True, zero_division=0)
    types = {k: v["f1-score"] for k, v in report.items() if "avg" not in k}
    return {"f1": f1_score(gold, pred), **{f"f1_{t}": f for t, f in types.items()}}


def test_members_and_ensemble_score_as_iter_tags_tags_them(members, dev, tmp_path, capsys):
    out = tmp_path / "scores" / "dev.json"
    code, printed, err = run_ner(
        ["score", *members, "--file", str(dev), "--consistency", "0", "1", "--json", str(out),
         "--device", "cpu"], capsys
    )  # fmt: skip
    assert code == 0, err
    scores = json.loads(out.read_text())
    assert list(scores) == [*members, "ensemble"]
    corpus = read_conll(str(dev))
    loaded = [load_tagger(p) for p in members]
    models = dict(zip([*members, "ensemble"], [*loaded, Ensemble(loaded)], strict=True))
    for name, model in models.items():
        assert list(scores[name]) == ["0.0", "1.0"]
        for weight in (0.0, 1.0):
            got = scores[name][str(weight)]
            for key, value in expected(model, corpus, weight).items():
                assert got[key] == pytest.approx(value, abs=1e-12), (name, weight, key)
    f1 = {name: scores[name]["0.0"]["f1"] for name in models}
    assert all(0.0 < value < 1.0 for value in f1.values()), f1
    assert f1["ensemble"] not in (f1[members[0]], f1[members[1]])
    for model in models.values():  # the weight changes each model's tags of this file
        assert tags_of(model, corpus, 0.0) != tags_of(model, corpus, 1.0)
    rows = [line for line in printed.splitlines() if line.startswith("|")]
    assert rows[0].startswith("| model (dev.txt) | consistency | F1 | precision | recall |")
    assert len(rows) == 2 + 3 * 2  # header, rule, a row per model and weight


def test_by_default_each_checkpoint_decodes_at_its_own_weight_as_ner_test(
    members, dev, tmp_path, capsys
):
    out = tmp_path / "own.json"
    code, _, err = run_ner(["score", *members, "--file", str(dev), "--json", str(out)], capsys)
    assert code == 0, err
    scores = json.loads(out.read_text())
    own = {members[0]: "1.0", members[1]: "0.0", "ensemble": "1.0"}  # the ensemble: the first's
    assert {name: list(by_weight) for name, by_weight in scores.items()} == {
        name: [weight] for name, weight in own.items()
    }
    code, _, err = run_ner(
        ["test", "--ckpt_path", members[0], "--data.test_file", str(dev), "--output",
         str(tmp_path / "test"), "--trainer.precision", "32-true"], capsys
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "test" / "seed-1.test-report.json").read_text())["metrics"]
    assert scores[members[0]]["1.0"]["f1"] == pytest.approx(report["f1"], abs=1e-12)


def test_context_pieces_replace_each_checkpoints_own(members, dev, tmp_path, capsys):
    out = tmp_path / "context.json"
    args = ["score", members[1], "--file", str(dev), "--context-pieces", "6", "--json", str(out)]
    code, _, err = run_ner(args, capsys)
    assert code == 0, err
    scores = json.loads(out.read_text())
    assert list(scores) == [members[1]]  # one checkpoint: no ensemble unless asked
    model = load_tagger(members[1])
    assert model.window_settings.context_pieces != 6
    model.window_settings = model.window_settings.overridden(context_pieces=6)
    want = expected(model, read_conll(str(dev)), 0.0)["f1"]
    assert scores[members[1]]["0.0"]["f1"] == pytest.approx(want, abs=1e-12)


def test_bad_input_is_a_one_line_error(members, dev, tmp_path, capsys):
    code, _, err = run_ner(["score", members[0], members[0], "--file", str(dev)], capsys)
    assert "a checkpoint is given twice" in one_line_error(code, err)
    code, _, err = run_ner(["score", members[0], "--file", str(tmp_path / "none.txt")], capsys)
    assert "none.txt" in one_line_error(code, err)


def test_the_documents_are_the_ones_training_saw(members, tmp_path, monkeypatch, capsys):
    """Regression (of the script `ner score` replaced): a file without -DOCSTART- was read as
    one document, so a model trained with context saw unrelated neighbours that training had
    not given it (dev F1 82.9 by `ner seeds` read as 79.3)."""
    from ner.inference import scoring

    seen = []
    routine = scoring.map_batches

    def map_batches(model, fn, words, doc_ids):
        seen.append(list(doc_ids))
        return routine(model, fn, words, doc_ids)

    monkeypatch.setattr(scoring, "map_batches", map_batches)
    plain = write_tiny_corpus(tmp_path / "plain.txt", tiny_sentences(5, seed=2), docs=0)
    marked = write_tiny_corpus(tmp_path / "marked.txt", tiny_sentences(4, seed=2), docs=2)
    for path in (plain, marked):
        assert run_ner(["score", *members, "--file", str(path)], capsys)[0] == 0
    assert seen == [[0, 1, 2, 3, 4], [0, 0, 1, 1]]  # one pass a file: the members share it


def test_its_json_saves_as_records(members, dev, tmp_path, capsys):
    """`ner results save --score`: a row a checkpoint (its seed from its path), or the
    ensemble's, at the weight asked for."""
    out, records = tmp_path / "dev.json", tmp_path / "records"
    args = ["score", *members, "--file", str(dev), "--consistency", "0", "1", "--json", str(out)]
    assert run_ner(args, capsys)[0] == 0
    scores = json.loads(out.read_text())
    for name, extra in (("members", []), ("ensemble", ["--of-ensemble"])):
        save = ["results", "save", name, "--score", str(out), "--weight", "1", "--label", name,
                "--records", str(records), *extra]  # fmt: skip
        code, _, err = run_ner(save, capsys)
        assert code == 0, err
    kept = json.loads((records / "members.json").read_text())["runs"]
    assert [r["seed"] for r in kept] == [1, 2]
    assert [r["dev"]["f1"] for r in kept] == [scores[m]["1.0"]["f1"] for m in members]
    (ensemble,) = json.loads((records / "ensemble.json").read_text())["runs"]
    assert ensemble["seed"] == "ensemble"
    assert ensemble["dev"]["f1"] == scores["ensemble"]["1.0"]["f1"]
    assert set(ensemble["dev"]) == {"f1", "f1_LOC", "f1_PER"}  # what the tables read
