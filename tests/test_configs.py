"""Every config file in configs/ parses and instantiates (run=False), so none can rot."""

from __future__ import annotations

from pathlib import Path

import pytest

from ner.commands.lightning import CONFIGS_DIR, cli_for
from ner.precision import auto_precision

READY_RUNS = sorted(CONFIGS_DIR.glob("*.yaml"))
PARTS = sorted(p for p in CONFIGS_DIR.rglob("*.yaml") if p.parent != CONFIGS_DIR)


def test_there_are_ready_runs_and_parts():
    names = {p.name for p in READY_RUNS}
    assert {"conll2003-minilm.yaml", "conll2003-bert-base.yaml", "trainer.yaml"} <= names
    combiners = {p.stem for p in (CONFIGS_DIR / "combiner").glob("*.yaml")}
    assert combiners == {"last", "second_to_last", "sum_last4", "concat_last4", "scalar_mix"}


@pytest.mark.parametrize("combiner", sorted((CONFIGS_DIR / "combiner").glob("*.yaml")), ids=str)
def test_every_combiner_config_instantiates(combiner: Path, tiny_model_dir, tiny_corpus_dir):
    cli = cli_for(
        ["-c", str(CONFIGS_DIR / "conll2003-minilm.yaml"), "--model.combiner", str(combiner),
         "--model.encoder", str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir)]
    )  # fmt: skip
    assert type(cli.model.combiner).__name__ in combiner.read_text()


def test_offline_default_instantiates_with_the_bundled_encoder(conll_dir, tiny_model_dir):
    cli = cli_for(["-c", str(CONFIGS_DIR / "conll2003-minilm.yaml")])
    assert cli.model.encoder.config.num_hidden_layers == 6
    assert cli.model.encoder.config.hidden_size == 384
    assert cli.model.labels == [
        "O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER",
    ]  # fmt: skip
    assert cli.model.scheme == "IOB1"
    assert cli.trainer.precision == auto_precision("cpu")


def test_bert_base_config_parses_with_a_local_encoder(tiny_model_dir, tiny_corpus_dir):
    # bert-base-cased itself is not downloadable here: swap in the tiny local model.
    cli = cli_for(
        ["-c", str(CONFIGS_DIR / "conll2003-bert-base.yaml"),
         "--model.encoder", str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir),
         "--trainer.accelerator", "cpu",
         "--trainer.precision", "32-true"]
    )  # fmt: skip
    assert type(cli.model.combiner).__name__ == "ConcatLayers"
    assert cli.model.head.classifier.in_features == 4 * 16
