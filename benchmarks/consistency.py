"""Tagging eng.testb with document consistency (`ner tag --consistency 1`) against without.

    ner bench consistency [--ckpt PATH] [--weight W] [--smoke] [--json PATH]

Both sides run `ner.inference.routine.iter_tags` in this process on the same sentences with
their `-DOCSTART-` documents (the documents give context either way): plain decoding scores and
decodes each batch; consistency scores every sentence of a document, then adds the priors and
decodes the document (`ner.inference.consistency`). Each side is timed after a warm-up, best of
`--repeats`; the ratio is consistency over plain. Without --ckpt an untrained tagger on the
encoder (seeded) stands in: the work per word is the same.
"""

from __future__ import annotations

import functools

from benchmarks.common import (
    CONLL_DIR,
    best_time,
    build_tagger,
    describe,
    headline,
    parse,
    parser,
    report,
)


def tag_all(model, words: list[list[str]], docs: list[int], weight: float) -> list:
    """Every sentence's (tags, scores) at consistency `weight`."""
    from ner.inference.routine import iter_tags

    return list(iter_tags(model, words, weight, doc_ids=docs))


def main(argv: list[str] | None = None) -> None:
    import torch

    from ner.corpus.reader import read_conll

    p = parser(__doc__.splitlines()[0], __file__)
    p.add_argument("--ckpt", help="a trained checkpoint (default: an untrained tagger)")
    p.add_argument("--weight", type=float, default=1.0, help="the consistency weight (default 1)")
    p.add_argument("--repeats", type=int, default=3)
    args = parse(p, argv)
    corpus = read_conll(str(CONLL_DIR / "eng.testb"))
    limit = 120 if args.smoke else None
    words = [s.words for s in corpus.sentences][:limit]
    docs = corpus.doc_ids[: len(words)]
    model = build_tagger(args.encoder, args.ckpt, args.seed).eval()
    sides = {"plain (per batch)": 0.0, f"consistency {args.weight:g} (per document)": args.weight}
    rows, seconds = [], {}
    with torch.inference_mode():
        for side, weight in sides.items():
            run = functools.partial(tag_all, model, words, docs, weight)
            seconds[side] = best_time(run, 1 if args.smoke else args.repeats)
    plain = seconds["plain (per batch)"]
    for side, s in seconds.items():
        rows.append([side, s, len(words) / s, s / plain])
    notes = [
        f"{len(words):,} sentences of eng.testb in {len(set(docs))} documents, "
        f"{describe(args.encoder)}{', ' + args.ckpt if args.ckpt else ' (untrained)'}",
        "seconds: best wall time of the whole file after a warm-up; ratio: over plain",
    ]
    headers = ["side", "seconds", "sentences/s", "ratio"]
    top = headline(
        "tagging eng.testb with document consistency vs without",
        "sentences/s",
        (rows[1][0], rows[1][2]),
        (rows[0][0], rows[0][2]),
    )
    report("Document consistency: tagging cost", headers, rows, notes, args, top=top)


if __name__ == "__main__":
    main()
