"""Tagging raw text or pre-split words: splitting, batching, decoding, entity spans."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ner.tagger import NERTagger

# CoNLL-2003 (Reuters) tokenization: acronyms like "U.S." stay whole, numbers keep their inner
# punctuation ("1,000", "3.5", "1996-08-22"), hyphenated words stay whole, clitics ("'s") and
# every other punctuation mark stand alone.
_WORD = re.compile(r"(?:[^\W\d_]\.){2,}|\w+(?:[-.,/&]\w+)*|'\w+|[^\w\s]", re.UNICODE)


def split_words(text: str) -> list[tuple[str, int, int]]:
    """Split raw text into CoNLL-style words with their `[start, end)` character offsets."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def words_and_offsets(item: str | Sequence[str]) -> tuple[list[str], list[tuple[int, int]], str]:
    """Words, their character offsets and the text they index: raw text is split CoNLL-style."""
    if isinstance(item, str):
        spans = split_words(item)
        return [w for w, _, _ in spans], [(s, e) for _, s, e in spans], item
    # Pre-split words: offsets refer to the words joined by single spaces.
    words, offsets, pos = list(item), [], 0
    for word in words:
        offsets.append((pos, pos + len(word)))
        pos += len(word) + 1
    return words, offsets, " ".join(words)


def iter_tags(
    tagger: NERTagger,
    sentences: Iterable[Sequence[str]],
    batch_size: int = 64,
    max_pieces: int | None = None,
    chunk_size: int = 4096,
    bf16: bool | None = None,
) -> Iterator[tuple[list[str], list[float]]]:
    """Yield (IOB2 tags, per-word scores) for each sentence, in input order, in bounded memory.

    `max_pieces`: padded pieces a batch (None: 1,024 on CPU, 8,192 on GPU). `bf16`: autocast in
    bf16 (None: where the device runs it fast, see `ner.precision`)."""
    from ner.alignment import align_sentences
    from ner.datamodule import batches_by_length, collate
    from ner.precision import autocast

    it = iter(sentences)
    device = next(tagger.parameters()).device
    if max_pieces is None:
        # CPU: small batches stay in cache; MiniLM on eng.testb ran 170 sentences/s at 1,024
        # pieces vs 147 at 8,192, with 760 vs 980 MiB peak RSS (NOTES.md)
        max_pieces = 1024 if device.type == "cpu" else 8192
    tagger.eval()
    while chunk := [list(s) for s in itertools.islice(it, chunk_size)]:
        aligned, _ = align_sentences(tagger.tokenizer, [[s] for s in chunk])
        rows = [
            {
                "input_ids": a[0].input_ids,
                "piece_word": a[0].piece_word,
                "num_pieces": a[0].num_pieces,
                "ner_tags": [-100] * len(words),
                "sent_id": i,
            }
            for i, (a, words) in enumerate(zip(aligned, chunk, strict=True))
        ]
        results: list[tuple[list[str], list[float]] | None] = [None] * len(rows)
        with torch.inference_mode(), autocast(device, bf16):
            for indices in batches_by_length(
                [r["num_pieces"] for r in rows], batch_size, max_pieces
            ):
                batch = collate([rows[i] for i in indices])
                batch = {k: v.to(device) for k, v in batch.items()}
                emissions = tagger(batch).float()
                tags, scores = tagger.head.decode(emissions, batch["word_mask"])
                for i, t, s in zip(indices, tags.tolist(), scores.tolist(), strict=True):
                    n = len(chunk[i])
                    results[i] = ([tagger.labels[x] for x in t[:n]], s[:n])
        yield from results  # type: ignore[misc]


def entities_from_tags(
    tags: Sequence[str], scores: Sequence[float], offsets: Sequence[tuple[int, int]], text: str
) -> list[dict[str, Any]]:
    """Entity dicts (`text`, `label`, `start`, `end`, `score`) from word-level IOB2 tags."""
    from seqeval.metrics.sequence_labeling import get_entities

    out = []
    for label, first, last in get_entities(list(tags)):
        start, end = offsets[first][0], offsets[last][1]
        score = sum(scores[first : last + 1]) / (last - first + 1)
        out.append(
            {"text": text[start:end], "label": label, "start": start, "end": end, "score": score}
        )
    return out


def predict_entities(
    tagger: NERTagger, texts: Sequence[str | Sequence[str]], **kwargs: Any
) -> list[list[dict[str, Any]]]:
    """Entities per input: raw strings are split CoNLL-style; word lists are taken as given."""
    prepared = [words_and_offsets(t) for t in texts]
    tagged = iter_tags(tagger, (words for words, _, _ in prepared), **kwargs)
    return [
        entities_from_tags(tags, scores, offsets, text)
        for (_, offsets, text), (tags, scores) in zip(prepared, tagged, strict=True)
    ]
