"""Where the modules of the flat layout went: checkpoints and configs written before the
package tree name classes by their old paths (`ner.combiners.ScalarMix`), and still load.

`MOVED` is the whole table. `install()` (run by `import ner`) makes each old module name import
the module it became, the same module object, so a config's `class_path: ner.heads.LinearHead`
and a user's `from ner.combiners import LayerCombiner` keep working; `current` maps a stored
class path to today's.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "ner.errors": "ner.utils.errors",
    "ner.files": "ner.utils.files",
    "ner.noise": "ner.utils.noise",
    "ner.precision": "ner.utils.precision",
    "ner.reader": "ner.corpus.reader",
    "ner.schemes": "ner.corpus.schemes",
    "ner.text": "ner.corpus.text",
    "ner.shapes": "ner.corpus.shapes",
    "ner.inputs": "ner.corpus.inputs",
    "ner.outputs": "ner.corpus.outputs",
    "ner.encoders": "ner.data.pretrained",
    "ner.alignment": "ner.data.alignment",
    "ner.dataset": "ner.data.dataset",
    "ner.splits": "ner.data.splits",
    "ner.batching": "ner.data.batching",
    "ner.feature_cache": "ner.data.feature_cache",
    "ner.feature_batches": "ner.data.feature_batches",
    "ner.datamodule": "ner.data.datamodule",
    "ner.stats": "ner.data.stats",
    "ner.combiners": "ner.modules.combiners",
    "ner.pooling": "ner.modules.pooling",
    "ner.heads": "ner.modules.heads",
    "ner.crf": "ner.modules.crf",
    "ner.word_features": "ner.modules.word_features",
    "ner.metrics": "ner.evaluation.metrics",
    "ner.analysis": "ner.evaluation.error_analysis",
    "ner.seeds": "ner.evaluation.spread",
    "ner.backends": "ner.inference.backends",
    "ner.export": "ner.inference.export",
    "ner.tagger": "ner.model.tagger",
    "ner.checkpoint": "ner.model.checkpoint",
    "ner.optim": "ner.model.optim",
    "ner.callbacks": "ner.model.callbacks",
    "ner.resume": "ner.model.resume",
    "ner.embed": "ner.layer_analysis.embed",
    "ner.probe": "ner.layer_analysis.probe",
    "ner.projection": "ner.layer_analysis.projection",
    "ner.plots": "ner.layer_analysis.plots",
    # the second reorganisation: serving above the model, the encoder network beside the
    # combiners (its names and files stay in data), layer analysis named for what it is
    "ner.data.encoders": "ner.data.pretrained",
    "ner.evaluation.analysis": "ner.evaluation.error_analysis",
    "ner.evaluation.seeds": "ner.evaluation.spread",
    "ner.model.evaluation": "ner.model.split_evaluation",
    "ner.cli.distributed": "ner.cli.launch",
    "ner.inference.api": "ner.serving.api",
    "ner.inference.batcher": "ner.serving.batcher",
    "ner.inference.server": "ner.serving.server",
    "ner.layers": "ner.layer_analysis",
    **{f"ner.layers.{name}": f"ner.layer_analysis.{name}" for name in (
        "embed", "plots", "probe", "probe_sweep", "probe_tables", "projection", "tensorboard")},
}  # fmt: skip


def current(class_path: str) -> str:
    """`module.Class` with its module's new name: `ner.combiners.X` -> `ner.modules.combiners.X`."""
    module, _, name = class_path.rpartition(".")
    return f"{MOVED.get(module, module)}.{name}" if module else class_path


class _OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as the module it became (one module object, two names)."""

    def __init__(self) -> None:
        self.specs: dict[str, object] = {}

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        self.specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # the import system stamped the old name's spec on the module: give it its own back
        module.__spec__ = self.specs[module.__name__]


def install() -> None:
    """Let the old module names import (once per process)."""
    if not any(isinstance(f, _OldNames) for f in sys.meta_path):
        # first: an old name inside a renamed package (`ner.layers.probe`) would otherwise be
        # found by the path finder in the new package's folder, as a second module object
        sys.meta_path.insert(0, _OldNames())
