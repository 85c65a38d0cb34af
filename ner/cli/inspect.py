"""`ner inspect`: validate CoNLL or span files (`ner.corpus.span_corpus`) and print their
statistics; for a span file also its misaligned spans, each with its line, and what rests on an
assumption about its offsets."""

from __future__ import annotations

import argparse
import json
import sys

from ner.cli.main import summary
from ner.corpus import schemes
from ner.corpus.span_alignment import OFFSETS
from ner.corpus.span_corpus import FORMATS, CorpusFormat, format_span_stats, read_any
from ner.data.pretrained import encoder_config, load_tokenizer
from ner.data.stats import corpus_stats, format_stats
from ner.utils.errors import NERError


def _load_tokenizer(name_or_path: str):
    try:
        return load_tokenizer(name_or_path)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ... here
        raise NERError(f"cannot load {name_or_path!r}: {exc}", path="--tokenizer") from None


def main(argv: list[str]) -> int:
    """`ner inspect FILE... [--tokenizer T] [--max-length N] [--scheme S] [--tag-column N]`.

    Also `--format F`, `--misaligned expand|drop`, `--offsets U` (span files), `--json`.
    Returns the exit code: 0, or 2 after printing `error: ...` on stderr.
    """
    parser = argparse.ArgumentParser(prog="ner inspect", description=summary("inspect"))
    parser.add_argument("files", nargs="+", metavar="FILE")
    parser.add_argument("--tokenizer", metavar="NAME_OR_PATH", help="also count word pieces")
    parser.add_argument(
        "--max-length", type=int, help="encoder window (default: the window rule of ner fit)"
    )
    parser.add_argument("--scheme", default="auto", choices=["auto", *schemes.SCHEMES])
    parser.add_argument("--tag-column", type=int, default=-1)
    parser.add_argument("--format", default="auto", choices=FORMATS, help="auto: by content")
    parser.add_argument(
        "--misaligned", choices=["expand", "drop"],
        help="count a span file as ner fit --data.misaligned would (default: list misaligned"
        " spans and leave them out of the counts)",
    )  # fmt: skip
    parser.add_argument(
        "--offsets", default="codepoints", choices=OFFSETS,
        help="unit of spans without text after a character beyond the BMP",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON object per file")
    args = parser.parse_intermixed_args(argv)  # options may come between the files
    try:
        if args.max_length is not None and args.tokenizer is None:
            raise NERError("needs --tokenizer", path="--max-length")
        policy = args.misaligned or "refuse"
        reading = CorpusFormat(args.format, args.scheme, args.tag_column, policy, args.offsets)
        loaded = [read_any(f, reading) for f in args.files]
        tokenizer = _load_tokenizer(args.tokenizer) if args.tokenizer else None
        config = encoder_config(args.tokenizer) if args.tokenizer else None
        results = [
            corpus_stats(c, tokenizer, args.max_length, config) | (r.stats() if r else {})
            for c, r in loaded
        ]
    except NERError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
    else:
        spans = [("\n" + format_span_stats(s)) if "misaligned" in s else "" for s in results]
        print("\n\n".join(format_stats(s) + more for s, more in zip(results, spans, strict=True)))
    return 0
