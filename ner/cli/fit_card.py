"""What `ner fit` writes into its model card (`ner.cli.model_card`): the checkpoint's labels
and parts, the dev scores of the validation that saved it (per type, from `ValidationHistory`),
the training data's counts, the recipe, the command and the machine; the YAML header names the
encoder, the training data and the dev F1 (`model-index`)."""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import yaml

from ner.cli.model_card import CARD, DEV, result, scores_table, set_result, source, write_card
from ner.cli.reports import saved
from ner.data.encoder_store import FETCHABLE
from ner.data.pretrained import BUNDLED_ENCODER
from ner.data.stats import NO_DOCUMENTS, corpus_stats
from ner.model.callbacks import ValidationHistory
from ner.model.checkpoint import read_checkpoint

# `language: en` for the encoders known to be English (the bundled one, the fetchable ones and
# those they stand in for); for any other the language is unknown, and the header omits it
ENGLISH = {BUNDLED_ENCODER, *FETCHABLE, *(e.hub for e in FETCHABLE.values()),
           *(e.stands_in_for for e in FETCHABLE.values())}  # fmt: skip
VERSIONS = ("ner", "torch", "transformers", "pytorch-lightning")


def write_fit_card(cli, config: Any) -> Path | None:
    """After a fit (global rank 0): the card beside the checkpoint it describes, from that
    checkpoint's `ner` section, the fit's config, data and validations; its path, or None when
    the fit saved nothing."""
    best, last = saved(cli.trainer)
    if cli.trainer.fast_dev_run or not (best or last):
        return None
    path = Path(best.best_model_path if best is not None else last)
    section = read_checkpoint(path)["ner"]
    dev = dev_scores(cli.trainer, best)
    header = card_header(section, config.data)
    if dev and "f1" in dev:
        set_result(header, config.run, result("validation", source(config.data, "val_file"),
                                              dev["f1"], "dev F1"))  # fmt: skip
    body = [
        f"# {config.run}\n\nA named-entity tagger trained with `ner` (run `{config.run}`).\n\n"
        f"Checkpoint: `{path.name}`. Tag with `ner tag {path.name} FILE`; `ner test --ckpt_path "
        f"{path.name} --data.test_file FILE` scores it and adds the test scores here.\n",
        labels_section(section),
        model_section(section),
        dev_section(dev, path.name, source(config.data, "val_file"), section),
        data_section(cli.datamodule, source(config.data, "train_file")),
        "## Recipe\n\nThe seed, model and data of the resolved config:\n\n```yaml\n"
        f"{recipe(config)}```\n",
        f"## Command\n\n```\nner {shlex.join(getattr(cli, 'argv', sys.argv[1:]))}\n```\n",
        machine_section(cli.trainer),
    ]
    write_card(path.parent / CARD, header, "\n".join(body))
    return path.parent / CARD


def dev_scores(trainer, best) -> dict[str, float] | None:
    """The scores of the validation that saved the best checkpoint (`f1`, `f1_PER`, ...,
    `epoch`, `step`): from the fit's `ValidationHistory`, else the monitored F1 alone."""
    if best is None or best.best_model_score is None:
        return None
    value = float(best.best_model_score)
    history = next((c for c in trainer.callbacks if isinstance(c, ValidationHistory)), None)
    found = history.scores_of(best.monitor, value) if history is not None else None
    if found is not None:
        return found
    return {"f1": value} if best.monitor == "val/f1" else None


def card_header(section: dict[str, Any], data: Any) -> dict[str, Any]:
    """The YAML header, without results: the language where known, library, tags, datasets."""
    name = section["encoder_name"]
    header: dict[str, Any] = {"language": "en"} if name in ENGLISH else {}
    local = Path(name).is_absolute() or Path(name).is_dir()  # a folder: its name, not its path
    header.update(
        {"library_name": "ner", "pipeline_tag": "token-classification",
         "tags": ["token-classification", "ner", Path(name).name if local else name],
         "datasets": [s for s in [source(data, "train_file")] if s], "metrics": ["f1"]}
    )  # fmt: skip
    return header


def labels_section(section: dict[str, Any]) -> str:
    """The entity types and the IOB2 labels of the checkpoint."""
    labels = section["labels"]
    types = sorted({label[2:] for label in labels if label != "O"})
    return (
        f"## Labels\n\nEntity types: {', '.join(types) or 'none'}.\n\n"
        f"Labels (IOB2): {', '.join(f'`{label}`' for label in labels)}; the training data's "
        f"scheme, {section['hparams'].get('scheme', 'IOB2')}, is the one predictions are "
        "written back in.\n"
    )


def spec_line(spec: dict[str, Any] | None) -> str:
    """`class.path` and its init arguments, or none."""
    if spec is None:
        return "none"
    return f"`{spec['class_path']}` `{json.dumps(spec.get('init_args') or {}, default=str)}`"


def model_section(section: dict[str, Any]) -> str:
    """The encoder and the pluggable parts, as the checkpoint records them."""
    config = json.loads(section["encoder_config"])
    modules, hparams = section["modules"], section["hparams"]
    windows = section.get("windows") or {}
    shown = [f"{k} {'default' if v is None else v}" for k, v in windows.items()]
    lines = [
        f"- encoder: `{section['encoder_name']}` ({config.get('model_type', '?')}, "
        f"{config.get('num_hidden_layers', '?')} layers x {config.get('hidden_size', '?')})",
        f"- combiner: {spec_line(modules.get('combiner'))}",
        f"- pooling: {hparams.get('pooling')}",
        f"- head: {spec_line(modules.get('head'))}",
        f"- word features: {spec_line(modules.get('word_features'))}",
        "- windows: " + (", ".join(shown) or "the defaults"),
    ]
    return "## Model\n\n" + "\n".join(lines) + "\n"


def dev_section(dev: dict | None, name: str, dataset: str | None, section: dict) -> str:
    """The dev scores of the validation that saved the checkpoint: per type where the fit
    kept them, else the overall F1 and how to get the rest."""
    if dev is None or "f1" not in dev:
        return f"{DEV}\n\nNone known; `ner validate --ckpt_path {name}` scores `{name}`.\n"
    mode = section["hparams"].get("metric_mode", "default")
    when = f" (epoch {int(dev['epoch'])}, step {int(dev['step'])})" if "epoch" in dev else ""
    head = f"{DEV}\n\nThe validation that saved `{name}`{when}, on `{dataset}`, entities "
    if not any(k.startswith("f1_") for k in dev):
        return (f"{head}matched in {mode} mode: F1 {dev['f1']:.4f}. Only the overall F1 is known; "
                f"`ner validate --ckpt_path {name}` scores each type.\n")  # fmt: skip
    return f"{head}matched in {mode} mode:\n\n{scores_table(dev)}"


def data_section(data, given: str | None) -> str:
    """The training data's counts (`ner inspect`'s), for a file split."""
    head = f"## Training data\n\n`{given}`"
    if not data.files.get("train"):
        return f"{head}: a hub dataset, not counted here.\n"
    stats = corpus_stats(data.corpus("train"))
    rows = [("documents", f"{stats['documents']:,}" if stats["documents"] else NO_DOCUMENTS),
            *((k, f"{stats[k]:,}") for k in ("sentences", "tokens")),
            ("entities", f"{sum(stats['entities'].values()):,}"),
            *((f"entities {t}", f"{n:,}") for t, n in stats["entities"].items())]  # fmt: skip
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return f"{head} ({stats['scheme']}):\n\n| | count |\n|---|---:|\n{table}\n"


def plain(value: Any) -> Any:
    """A config value as plain YAML data, unset (None) entries left out."""
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value if isinstance(value, str | int | float | bool) or value is None else str(value)


def recipe(config: Any) -> str:
    """The seed and the model and data sections of the resolved config, compact."""
    parts = {"seed_everything": config.get("seed_everything"), "model": config.model,
             "data": config.data}  # fmt: skip
    return yaml.safe_dump(plain(parts), sort_keys=False, width=100)


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo, else what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def version(package: str) -> str:
    """An installed package's version."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_section(trainer) -> str:
    """The machine of global rank 0 and the trainer's devices and precision."""
    device = trainer.strategy.root_device
    lines = [f"- CPU: {cpu_model()}, {os.cpu_count()} cores",
             f"- devices: {trainer.num_nodes} node(s) x {trainer.num_devices} {device.type}, "
             f"precision {trainer.precision}"]  # fmt: skip
    if device.type == "cuda":
        lines.append(f"- GPU: {torch.cuda.get_device_name(device)}")
    lines.append(f"- {platform.system()}, Python {platform.python_version()}, "
                 + ", ".join(f"{p} {version(p)}" for p in VERSIONS))  # fmt: skip
    return "## Machine\n\n" + "\n".join(lines) + "\n"
