"""Corpus statistics and the `ner inspect` command (no torch; transformers only for pieces)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ner import schemes
from ner.alignment import load_tokenizer, special_tokens, tokenize_words
from ner.errors import NERError
from ner.reader import Corpus, read_conll

MAX_WINDOW = 512  # tokenizers without a model_max_length report about 1e30
BATCH = 1024  # sentences a tokenizer call


def corpus_stats(corpus: Corpus, tokenizer=None, max_length: int | None = None) -> dict[str, Any]:
    """Counts of `corpus`; with a (fast) tokenizer also word-piece lengths against the window."""
    sentences = corpus.sentences
    stats: dict[str, Any] = {
        "file": corpus.path,
        "scheme": corpus.scheme,
        "documents": len(corpus.documents),
        "sentences": len(sentences),
        "tokens": corpus.num_tokens,
        "entities": dict(sorted(corpus.entities().items())),
        "longest_sentence_words": max(len(s.words) for s in sentences),
    }
    if tokenizer is None:
        return stats
    window = max_length if max_length is not None else min(tokenizer.model_max_length, MAX_WINDOW)
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
        ("documents", f"{stats['documents']:,}"),
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


def _load_tokenizer(name_or_path: str):
    try:
        return load_tokenizer(name_or_path)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ... here
        raise NERError(f"cannot load {name_or_path!r}: {exc}", path="--tokenizer") from None


def inspect_main(argv: list[str]) -> int:
    """`ner inspect FILE... [--tokenizer T] [--max-length N] [--scheme S] [--tag-column N]`.

    Also `--json`. Returns the exit code: 0, or 2 after printing `error: ...` on stderr.
    """
    parser = argparse.ArgumentParser(
        prog="ner inspect", description="Validate CoNLL files and print their statistics."
    )
    parser.add_argument("files", nargs="+", metavar="FILE")
    parser.add_argument("--tokenizer", metavar="NAME_OR_PATH", help="also count word pieces")
    parser.add_argument("--max-length", type=int, help="encoder window (default: the tokenizer's)")
    parser.add_argument("--scheme", default="auto", choices=["auto", *schemes.SCHEMES])
    parser.add_argument("--tag-column", type=int, default=-1)
    parser.add_argument("--json", action="store_true", help="one JSON object per file")
    args = parser.parse_intermixed_args(argv)  # options may come between the files
    try:
        if args.max_length is not None and args.tokenizer is None:
            raise NERError("needs --tokenizer", path="--max-length")
        corpora = [read_conll(f, args.scheme, args.tag_column) for f in args.files]
        tokenizer = _load_tokenizer(args.tokenizer) if args.tokenizer else None
        results = [corpus_stats(c, tokenizer, args.max_length) for c in corpora]
    except NERError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
    else:
        print("\n\n".join(format_stats(s) for s in results))
    return 0
