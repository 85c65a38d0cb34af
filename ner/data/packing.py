"""Training packs: consecutive sentences of a document trained as one row.

With document context (FLERT) every sentence is encoded with up to `context_pieces` of its
neighbours on each side, so a 20-piece sentence costs a window of ~84 pieces, and the same
neighbour pieces are encoded again for the next sentence. A pack of consecutive sentences is
encoded once, each sentence seeing the others in full; context pieces are added only at the
pack's two ends. Packing is for training alone: evaluation and inference tag sentence by
sentence, as the metric counts them.
"""

from __future__ import annotations

from typing import Any


def pack_rows(rows: dict[str, list], max_words: int) -> dict[str, list]:
    """Columns `tokens`, `ner_tags`, `doc_id` (sentences in document order) -> the same columns
    for packs: runs of consecutive sentences of one document, each run as long as it stays
    within `max_words` words (a longer sentence is a pack alone). `sent_id`: the pack's index."""
    packs: dict[str, list[Any]] = {"tokens": [], "ner_tags": [], "doc_id": [], "sent_id": []}
    for words, tags, doc in zip(rows["tokens"], rows["ner_tags"], rows["doc_id"], strict=True):
        same_doc = bool(packs["doc_id"]) and packs["doc_id"][-1] == doc
        if same_doc and len(packs["tokens"][-1]) + len(words) <= max_words:
            packs["tokens"][-1] = packs["tokens"][-1] + list(words)
            packs["ner_tags"][-1] = packs["ner_tags"][-1] + list(tags)
            continue
        packs["tokens"].append(list(words))
        packs["ner_tags"].append(list(tags))
        packs["doc_id"].append(doc)
        packs["sent_id"].append(len(packs["sent_id"]))
    return packs


def pack_dataset(dataset, max_words: int):
    """A `ner.data.dataset` split with its sentences packed (`pack_rows`), same features."""
    from datasets import Dataset

    columns = dataset.select_columns(["tokens", "ner_tags", "doc_id"]).to_dict()
    return Dataset.from_dict(pack_rows(columns, max_words), features=dataset.features)
