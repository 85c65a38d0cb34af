"""ner: named-entity recognition over the whole hidden-state tuple of a BERT-style encoder."""

from typing import Any

__all__ = ["NERTagger", "NERDataModule"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `ner.reader` and `ner inspect` work without importing torch.
    if name == "NERTagger":
        from ner.tagger import NERTagger

        return NERTagger
    if name == "NERDataModule":
        from ner.datamodule import NERDataModule

        return NERDataModule
    raise AttributeError(f"module 'ner' has no attribute {name!r}")
