"""Dev (or test) F1 of each checkpoint alone and of their ensemble (`ner tag --ensemble`'s).

    python scripts/ensemble.py CKPT CKPT [CKPT...] [--file CONLL] [--consistency W] [--json PATH]

Each model tags the file's documents (default: eng.testa, the dev split) with its own window
settings (document context included) and decoding (document consistency at the checkpoint's
weight, the ensemble at the first's, unless `--consistency W`) through the one inference routine,
and is scored with the metric `ner test` uses.
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
from ner.inference.ensemble import Ensemble  # noqa: E402
from ner.inference.routine import iter_tags  # noqa: E402
from ner.model.tagger import load_tagger  # noqa: E402


def score(model, words, doc_ids, gold, types, weight: float | None) -> dict:
    tags = [t for t, _ in iter_tags(model, words, weight, doc_ids=doc_ids)]
    return entity_scores(entity_counts(tags, gold), types)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoints", nargs="+")
    dev = ROOT.parent / "shared" / "data" / "conll2003" / "eng.testa"
    p.add_argument("--file", default=str(dev), help="a CoNLL file (default: eng.testa)")
    p.add_argument("--consistency", type=float, default=None,
                   help="document consistency weight (default: each checkpoint's own)")  # fmt: skip
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    corpus = read_conll(args.file)
    # the documents training saw (`Corpus.doc_ids`: none without -DOCSTART-)
    sentences, doc_ids = corpus.sentences, corpus.doc_ids
    words, gold = [s.words for s in sentences], [s.tags for s in sentences]
    types = sorted(corpus.entities())
    members = [load_tagger(c) for c in args.checkpoints]
    rows = {
        c: score(m, words, doc_ids, gold, types, args.consistency)
        for c, m in zip(args.checkpoints, members, strict=True)
    }
    ensemble = Ensemble(members, args.checkpoints)
    rows["ensemble"] = score(ensemble, words, doc_ids, gold, types, args.consistency)
    print(f"| model | F1 on {Path(args.file).name} | " + " | ".join(types) + " |")
    print("|---|---|" + "---|" * len(types))
    for name, r in rows.items():
        cells = [f"{100 * r['f1']:.2f}"] + [f"{100 * r[f'f1_{t}']:.2f}" for t in types]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
