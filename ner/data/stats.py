"""Corpus statistics for `ner inspect` (no torch; a tokenizer only for the piece counts)."""

from __future__ import annotations

from typing import Any

from ner.corpus.reader import Corpus
from ner.data.alignment import special_tokens, tokenize_words
from ner.data.windows import default_windows
from ner.utils.errors import NERError

BATCH = 1024  # sentences a tokenizer call


NO_DOCUMENTS = "none (no -DOCSTART-: each sentence alone, without document context)"


def corpus_stats(
    corpus: Corpus, tokenizer=None, max_length: int | None = None, config: Any = None
) -> dict[str, Any]:
    """Counts of `corpus`; with a (fast) tokenizer also word-piece lengths against the encoder
    window (`max_length`, else the window rule over the tokenizer and the encoder `config`)."""
    sentences = corpus.sentences
    stats: dict[str, Any] = {
        "file": corpus.path,
        "scheme": corpus.scheme,
        # -DOCSTART- documents; 0 without any (each sentence then alone: `Corpus.doc_ids`)
        "documents": len(corpus.documents) if corpus.has_docstart else 0,
        "sentences": len(sentences),
        "tokens": corpus.num_tokens,
        "entities": dict(sorted(corpus.entities().items())),
        "longest_sentence_words": max(len(s.words) for s in sentences),
    }
    if tokenizer is None:
        return stats
    window = max_length or default_windows(tokenizer, config).max_length
    prefix, suffix = special_tokens(tokenizer)
    specials = len(prefix) + len(suffix)
    if window <= specials:
        raise NERError(
            f"must be more than the {specials} special tokens, not {window}", "max_length"
        )
    lengths: list[int] = []
    zero = 0
    words = [s.words for s in sentences]
    for i in range(0, len(words), BATCH):
        # zero-piece words count as the one [UNK] piece the model is given for them
        pieces, batch_zero = tokenize_words(tokenizer, words[i : i + BATCH])
        lengths += [specials + sum(len(p) for p in sentence) for sentence in pieces]
        zero += batch_zero
    stats["longest_sentence_pieces"] = max(lengths)
    stats["max_length"] = window
    stats["sentences_over_window"] = sum(n > window for n in lengths)
    stats["zero_piece_words"] = zero
    return stats


def format_stats(stats: dict[str, Any]) -> str:
    """A readable multi-line report of `corpus_stats`."""
    entities = stats["entities"]
    kinds = ", ".join(f"{kind} {n:,}" for kind, n in entities.items())
    rows = [
        ("scheme", stats["scheme"]),
        ("documents", f"{stats['documents']:,}" if stats["documents"] else NO_DOCUMENTS),
        ("sentences", f"{stats['sentences']:,}"),
        ("tokens", f"{stats['tokens']:,}"),
        ("entities", f"{sum(entities.values()):,}" + (f" ({kinds})" if kinds else "")),
        ("longest sentence", f"{stats['longest_sentence_words']:,} words"),
    ]
    if "max_length" in stats:
        rows += [
            ("most pieces", f"{stats['longest_sentence_pieces']:,} (special tokens included)"),
            ("encoder window", f"{stats['max_length']:,} pieces"),
            ("sentences over window", f"{stats['sentences_over_window']:,}"),
            ("zero-piece words", f"{stats['zero_piece_words']:,}"),
        ]
    width = max(len(label) for label, _ in rows)
    return "\n".join([stats["file"]] + [f"  {label:<{width}}  {value}" for label, value in rows])
