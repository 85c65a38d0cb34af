"""Every config file in configs/ and every `ner fit` command of the README instantiates
(model, data and trainer built, nothing run), so neither can rot."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import ROOT, tiny_sentences
from pytorch_lightning.callbacks import ModelCheckpoint

from ner.commands.lightning import CONFIGS_DIR, cli_for
from ner.precision import auto_precision

READY_RUNS = ["conll2003-minilm.yaml", "conll2003-bert-base.yaml"]
CONLL_LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


def readme_fit_commands() -> list[str]:
    """The `ner fit ...` commands of the README's shell blocks (`\\` continuations joined)."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    blocks = [block.replace("\\\n", " ") for block in blocks]
    lines = [ln.split("  #")[0].strip() for block in blocks for ln in block.splitlines()]
    return [ln for ln in lines if ln.startswith("ner fit ")]


@pytest.fixture(scope="module")
def hub_copy(tmp_path_factory):
    """A local stand-in for the hub's CoNLL-2003 copy (no network here)."""
    from datasets import DatasetDict
    from test_dataset import hub_rows

    rows = hub_rows(tiny_sentences(8, seed=2), docs=2)
    path = tmp_path_factory.mktemp("hub") / "conll2003"
    DatasetDict({"train": rows, "validation": rows, "test": rows}).save_to_disk(path)
    return path


def localise(args: list[str], conll_dir: Path, tiny_model_dir: Path, hub: Path) -> list[str]:
    """The README's placeholders -> files that exist here; a hub encoder -> the tiny model."""
    swap = {
        "/path/to/conll2003": str(conll_dir),
        "lhoestq/conll2003": str(hub),
        "train.conll": str(conll_dir / "eng.train"),
        "dev.conll": str(conll_dir / "eng.testa"),
    }
    args = [swap.get(a, a) for a in args if a != "--print_config"]
    if any("bert-base" in a for a in args):  # not downloadable here
        args += ["--model.encoder", str(tiny_model_dir), "--trainer.accelerator", "cpu"]
    return args


def test_the_readme_shows_the_compositions():
    commands = readme_fit_commands()
    assert "ner fit -c configs/conll2003-minilm.yaml" in commands
    assert any("--data configs/data/" in c and "--model configs/encoder/" in c for c in commands)
    assert len(commands) >= 8


@pytest.mark.parametrize("command", readme_fit_commands())
def test_every_readme_fit_command_instantiates(
    command, conll_dir, tiny_model_dir, hub_copy, monkeypatch
):
    monkeypatch.chdir(ROOT)
    args = localise(shlex.split(command)[2:], conll_dir, tiny_model_dir, hub_copy)
    if "--ckpt_path" in args:  # an option of `fit` itself, not of the classes built here
        at = args.index("--ckpt_path")
        assert args[at + 1] == "last" or Path(args[at + 1]).suffix == ".ckpt"
        del args[at : at + 2]
    cli = cli_for(args)
    assert cli.model.labels == CONLL_LABELS or "hub" in " ".join(args)
    checkpoints = [c for c in cli.trainer.callbacks if isinstance(c, ModelCheckpoint)]
    run = args[args.index("--run") + 1] if "--run" in args else None
    for callback in checkpoints:  # `run:` names the checkpoint folder
        assert Path(callback.dirpath).parent.name == "checkpoints"
        if run:
            assert Path(callback.dirpath).name == run


@pytest.mark.parametrize("combiner", sorted((CONFIGS_DIR / "combiner").glob("*.yaml")), ids=str)
def test_every_combiner_config_instantiates(combiner: Path, tiny_model_dir, tiny_corpus_dir):
    cli = cli_for(
        ["-c", str(CONFIGS_DIR / "conll2003-minilm.yaml"), "--model.combiner", str(combiner),
         "--model.encoder", str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir)]
    )  # fmt: skip
    assert type(cli.model.combiner).__name__ in combiner.read_text()


def referenced_configs(path: Path) -> set[Path]:
    """The config files `path` names (`data: data/conll2003.yaml`, `head: ../head/crf.yaml`),
    and the files they name in turn."""
    found: set[Path] = set()
    todo = [path]
    while todo:
        current = todo.pop()
        for name in re.findall(r"[\w./-]+\.yaml", current.read_text()):
            target = (current.parent / name).resolve()
            if target.is_file() and target not in found:
                found.add(target)
                todo.append(target)
    return found


def test_every_config_file_is_used_by_a_ready_run_or_the_readme():
    readme = (ROOT / "README.md").read_text()
    used = set().union(*(referenced_configs(CONFIGS_DIR / name) for name in READY_RUNS))
    for path in CONFIGS_DIR.rglob("*.yaml"):
        if path.parent.name == "combiner":
            continue  # the combiner menu, each instantiated above
        relative = path.relative_to(CONFIGS_DIR)
        in_readme = str(relative) in readme or path.name in readme
        assert path.resolve() in used or in_readme, f"configs/{relative} is used nowhere"


def test_config_references_are_followed():
    used = referenced_configs(CONFIGS_DIR / "conll2003-minilm.yaml")
    assert CONFIGS_DIR.resolve() / "head" / "crf.yaml" in used  # through encoder/minilm.yaml
    assert CONFIGS_DIR.resolve() / "conll2003-bert-base.yaml" not in used


def test_offline_default_instantiates_with_the_bundled_encoder(conll_dir, monkeypatch):
    monkeypatch.chdir(ROOT)
    cli = cli_for(["-c", str(CONFIGS_DIR / "conll2003-minilm.yaml")])
    assert cli.model.encoder.config.num_hidden_layers == 6
    assert cli.model.encoder.config.hidden_size == 384
    assert cli.model.labels == CONLL_LABELS
    assert cli.model.scheme == "IOB1"
    assert cli.trainer.precision == auto_precision("cpu")
    assert cli.trainer.max_epochs == 3 and cli.trainer.gradient_clip_val == 1.0
    # the recipe chosen on dev (NOTES.md, accuracy ladder)
    assert cli.model.head.crf_layer is not None and cli.model.encoder_lr == 1e-4
    features = cli.model.word_features
    assert features.casing_dim == 16 and features.char_dim == 16
    assert features.inputs == ("word_shape", "word_chars")
    assert cli.datamodule.context_pieces == 32
    dirs = {c.dirpath for c in cli.trainer.callbacks if isinstance(c, ModelCheckpoint)}
    assert dirs == {str(ROOT / "checkpoints" / "conll2003-minilm")}
    assert cli.trainer.logger.name == "conll2003-minilm"


def test_bert_base_config_parses_with_a_local_encoder(tiny_model_dir, tiny_corpus_dir):
    # bert-base-cased itself is not downloadable here: swap in the tiny local model.
    cli = cli_for(
        ["-c", str(CONFIGS_DIR / "conll2003-bert-base.yaml"),
         "--model.encoder", str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir),
         "--trainer.accelerator", "cpu", "--trainer.precision", "32-true"]
    )  # fmt: skip
    assert type(cli.model.combiner).__name__ == "ConcatLayers"
    # the tiny tokenizer lower-cases: casing features (16) join the 4 concatenated layers
    assert cli.model.head.classifier.in_features == 4 * 16 + 16


def test_setting_only_head_crf_names_the_fix(tiny_model_dir, tiny_corpus_dir):
    """Regression: `--model.head.crf true` alone makes jsonargparse build the base head class,
    which used to die in a NotImplementedError traceback."""
    from ner.errors import NERError

    with pytest.raises(NERError, match="--model.head ner.heads.LinearHead --model.head.crf true"):
        cli_for(["-c", str(CONFIGS_DIR / "trainer.yaml"), "--model.encoder",
                 str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir),
                 "--model.head.crf", "true"])  # fmt: skip
    cli = cli_for(["-c", str(CONFIGS_DIR / "trainer.yaml"), "--model.encoder",
                   str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir),
                   "--model.head", "ner.heads.LinearHead", "--model.head.crf", "true"])  # fmt: skip
    assert cli.model.head.crf and cli.model.head.crf_layer is not None
