"""ner: named-entity recognition over the whole hidden-state tuple of a BERT-style encoder."""

from typing import Any

from ner.utils import moved

moved.install()  # checkpoints and configs that name `ner.combiners.X` etc. still load

__all__ = ["NERTagger", "NERDataModule"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `ner.corpus.reader` and `ner inspect` work without importing torch.
    if name == "NERTagger":
        from ner.model.tagger import NERTagger

        return NERTagger
    if name == "NERDataModule":
        from ner.data.datamodule import NERDataModule

        return NERDataModule
    raise AttributeError(f"module 'ner' has no attribute {name!r}")
