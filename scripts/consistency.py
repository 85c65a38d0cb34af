"""Dev (or test) F1 of checkpoints, and of their ensemble, decoded with document-level consistency
at several weights (`ner tag --consistency W`; `ner.inference.consistency`).

    python scripts/consistency.py CKPT [CKPT...] [--weights W ...] [--sure P] [--file CONLL]
                                  [--context-pieces N] [--json PATH]

Each model scores the file's documents once through the one inference routine
(`ner.inference.routine.map_batches`, its own window settings); every weight then decodes those
scores document by document, exactly as `iter_tags(..., consistency=W)` does, and is scored with
the metric `ner test` uses. `--context-pieces N` reads N pieces of document context a side
instead of the checkpoints' own (as `ner test --data.context_pieces N` would), to see what wider
context is worth to models trained with less.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ner.corpus.reader import read_conll  # noqa: E402
from ner.evaluation.metrics import entity_counts, entity_scores  # noqa: E402
from ner.inference.consistency import SURE, decode_documents, sentence_outputs  # noqa: E402
from ner.inference.ensemble import Ensemble  # noqa: E402
from ner.inference.routine import map_batches  # noqa: E402
from ner.model.tagger import load_tagger  # noqa: E402


def sweep(model, words, doc_ids, gold, types, weights, sure) -> dict[str, dict]:
    """The scores of `model` at each consistency weight, from one pass of the encoder."""
    outputs = list(map_batches(model, lambda b: sentence_outputs(model, b), words, doc_ids))
    rows = {}
    for weight in weights:
        tagged = decode_documents(model, words, outputs, doc_ids, weight, sure)
        tags = [t for t, _ in tagged]
        rows[str(weight)] = entity_scores(entity_counts(tags, gold), types)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--weights", nargs="+", type=float, default=[0.0, 0.25, 0.5, 1.0, 2.0])
    p.add_argument("--sure", type=float, default=SURE, help=f"the gate (default {SURE}; >1: off)")
    dev = ROOT.parent / "shared" / "data" / "conll2003" / "eng.testa"
    p.add_argument("--file", default=str(dev), help="a CoNLL file (default: eng.testa)")
    p.add_argument("--no-ensemble", action="store_true", help="only the checkpoints alone")
    p.add_argument("--context-pieces", type=int, help="context a side (default: each model's)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    corpus = read_conll(args.file)
    if not corpus.has_docstart:
        sys.exit(f"{args.file}: no -DOCSTART- lines, so no documents to be consistent across")
    words = [s.words for s in corpus.sentences]
    gold = [s.tags for s in corpus.sentences]
    types = sorted(corpus.entities())
    members = [load_tagger(c) for c in args.checkpoints]
    if args.context_pieces is not None:
        for m in members:
            m.window_settings = m.window_settings.overridden(context_pieces=args.context_pieces)
    models = dict(zip(args.checkpoints, members, strict=True))
    if len(members) > 1 and not args.no_ensemble:
        models["ensemble"] = Ensemble(members, args.checkpoints)
    rows = {
        name: sweep(m, words, corpus.doc_ids, gold, types, args.weights, args.sure)
        for name, m in models.items()
    }
    print(f"| model ({Path(args.file).name}) | " + " | ".join(map(str, args.weights)) + " |")
    print("|---|" + "---|" * len(args.weights))
    for name, by_weight in rows.items():
        cells = [f"{100 * r['f1']:.2f}" for r in by_weight.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
