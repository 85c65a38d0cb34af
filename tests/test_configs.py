"""Every config file in configs/ instantiates (model, data and trainer built, nothing run), no
config restates a default of the code or quotes a result, each experiment file is a named recipe
that sets every value its name promises, and each record's config resolves to itself (the
README's commands run in test_readme.py)."""

from __future__ import annotations

import functools
import inspect
import json
import re
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, build_tiny_bert
from pytorch_lightning.callbacks import ModelCheckpoint

from ner.cli.lightning import CONFIGS_DIR, cli_for
from ner.cli.seeds import fit_config
from ner.data.datamodule import NERDataModule
from ner.model.tagger import NERTagger
from ner.utils.precision import auto_precision

READY_RUNS = ["conll2003-minilm.yaml", "conll2003-bert-base.yaml"]
CONLL_LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


# Each recipe of configs/experiment/ and the values its name promises: the file sets each itself,
# whatever the offline default holds, so a change of the default never changes a recipe.
RECIPES = {
    "quick": {"trainer.max_epochs": 2, "data.context_pieces": 0, "data.batch_size": 32},
    "fast": {"model.encoder_layers": 5},
    "context64": {"data.context_pieces": 64},
    "epochs5": {"trainer.max_epochs": 5},
    "packed": {"data.pack_words": 64, "data.batch_size": 10, "data.context_pieces": 16},
}
# The accuracy ladder's rungs: no experiment files, each a record holding its run's config.
RUNGS = ["base", "casing", "crf", "scalar_mix", "lr1e-4", "lr2e-4", "lr1e-4-chars", "mlm",
         "epochs5-ema", "batch8", "epochs4", "lr7e-5"]  # fmt: skip


def test_each_recipe_sets_what_its_name_promises(tmp_path, monkeypatch):
    """configs/experiment/ holds the named recipes only; each file sets the values its name
    promises, and every value it sets reaches the classes built."""
    # As deep as the bundled MiniLM, so the fast recipe (first 5 of 6 layers) builds.
    tiny_model_dir = build_tiny_bert(tmp_path, num_layers=6)
    monkeypatch.chdir(ROOT)  # the configs name ../shared/data/conll2003
    recipes = sorted((CONFIGS_DIR / "experiment").glob("*.yaml"))
    assert {p.stem for p in recipes} == set(RECIPES)
    base = ["-c", str(CONFIGS_DIR / "conll2003-minilm.yaml")]
    for path in recipes:
        tree = yaml.safe_load(path.read_text())
        changed = leaves(tree)
        assert set(RECIPES[path.stem]) <= set(changed), f"{path.name} leaves a value to the default"
        config = cli_for([*base, "-c", str(path), "--model.encoder", str(tiny_model_dir)]).config
        for key in changed:
            value = functools.reduce(lambda node, name: node[name], key.split("."), tree)
            assert config[key] == value, f"{path.name}: {key}"
        for key, value in RECIPES[path.stem].items():
            assert config[key] == value, f"{path.name}: {key}"


def test_every_record_config_resolves_to_itself(tmp_path):
    """A record's config (what `ner seeds --from-record` trains) parses with today's code, and
    resolves to exactly what it holds: nothing unknown, nothing dropped, nothing added."""
    with_config = {}
    for path in sorted((ROOT / "docs" / "runs").rglob("*.json")):
        config = json.loads(path.read_text()).get("config")
        if config is not None:
            with_config[path.relative_to(ROOT / "docs" / "runs").with_suffix("").as_posix()] = (
                config
            )
    assert {f"ladder/{rung}" for rung in RUNGS} <= set(with_config)
    for name, config in with_config.items():
        written = tmp_path / f"{name.replace('/', '-')}.yaml"
        written.write_text(yaml.safe_dump(config))
        assert fit_config(["-c", str(written)]) == config, name


def leaves(tree: dict, prefix: str = "") -> list[str]:
    """The dotted keys of a YAML mapping's leaves; a value naming a config file is a leaf."""
    keys = []
    for name, value in tree.items():
        if isinstance(value, dict):
            keys += leaves(value, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


@pytest.mark.parametrize(
    ("group", "cls"),
    [("model", NERTagger), ("data", NERDataModule)],
)
def test_no_config_restates_a_code_default(group, cls):
    defaults = {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()}
    for path in (CONFIGS_DIR / group).glob("*.yaml"):
        for name, value in yaml.safe_load(path.read_text()).items():
            if name == "encoder":
                continue  # a model file names its encoder, whatever the code's default is
            assert value != defaults[name], f"{path}: {name}: {value!r} is the code's default"


def test_configs_hold_no_results():
    """Figures belong in docs/results.md, next to the command that made them."""
    for path in CONFIGS_DIR.rglob("*.yaml"):
        text = path.read_text()
        assert not re.search(r"\d+\.\d+ *(±|\+-)|F1 \d", text), f"{path} quotes a result"


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
        if path.parent.name in ("combiner", "experiment"):
            continue  # menus, each instantiated above
        relative = path.relative_to(CONFIGS_DIR)
        in_readme = str(relative) in readme or path.name in readme
        assert path.resolve() in used or in_readme, f"configs/{relative} is used nowhere"


def test_config_references_are_followed():
    used = referenced_configs(CONFIGS_DIR / "conll2003-minilm.yaml")
    assert CONFIGS_DIR.resolve() / "head" / "crf.yaml" in used  # through model/minilm.yaml
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
    # the recipe chosen on dev (docs/results.md, the accuracy ladder)
    assert cli.model.head.crf_layer is not None and cli.model.encoder_lr == 1e-4
    features = cli.model.word_features
    assert features.casing_dim == 16 and features.char_dim == 16
    assert features.inputs == ("word_shape", "word_chars")
    assert cli.datamodule.context_pieces == 32 and cli.datamodule.batch_size == 16
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
    from ner.utils.errors import NERError

    with pytest.raises(
        NERError, match="--model.head ner.modules.heads.LinearHead --model.head.crf true"
    ):
        cli_for(["-c", str(CONFIGS_DIR / "trainer.yaml"), "--model.encoder",
                 str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir),
                 "--model.head.crf", "true"])  # fmt: skip
    cli = cli_for(["-c", str(CONFIGS_DIR / "trainer.yaml"), "--model.encoder",
                   str(tiny_model_dir), "--data.data_dir", str(tiny_corpus_dir),
                   "--model.head", "ner.modules.heads.LinearHead",
                   "--model.head.crf", "true"])  # fmt: skip
    assert cli.model.head.crf and cli.model.head.crf_layer is not None
