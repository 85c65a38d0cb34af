"""`ner project CKPT FILE --output DIR`: the `LayerProjection` picture of a trained checkpoint
for a CoNLL file with gold tags, without training: `DIR/projection.png` (a panel a hidden state
plus the combiner's output, silhouette by gold type in each title) and `DIR/projection.npz`
(the 2-D coordinates, words, gold and predicted tags, scores), each written whole.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ner.cli.main import summary
from ner.corpus.reader import read_conll
from ner.layer_analysis.projection import METHODS, make_frame, stratified_sample, write_frame
from ner.model.tagger import load_tagger
from ner.utils.extras import require
from ner.utils.files import writable_folder


def parser() -> argparse.ArgumentParser:
    """The options of `ner project`."""
    p = argparse.ArgumentParser(prog="ner project", description=summary("project"))
    p.add_argument("checkpoint", help="a checkpoint written by `ner fit`")
    p.add_argument("file", help="a CoNLL file whose last column holds gold tags")
    p.add_argument("--output", required=True, help="folder for projection.png and .npz")
    p.add_argument("--sample", type=int, default=50, help="words of each gold type at most")
    p.add_argument("--method", choices=METHODS, default="pca")
    p.add_argument("--seed", type=int, default=0, help="of the word sample and of t-SNE")
    p.add_argument("--dpi", type=int, default=100)
    return p


def main(argv: list[str]) -> int:
    """Project; bad input or output fails before anything is written."""
    args = parser().parse_args(argv)
    require("analysis", "ner project")
    corpus = read_conll(args.file)
    sentences = [(s.words, s.tags) for s in corpus.sentences]
    sample = stratified_sample(sentences, args.sample, args.seed, args.file)
    model = load_tagger(args.checkpoint).eval()
    directory = writable_folder(args.output)  # after the checkpoint: no empty folder on a bad one
    frame = make_frame(model, sample, args.method, args.seed)
    title = f"{Path(args.checkpoint).name} on {Path(args.file).name} ({args.method})"
    write_frame(directory, "projection", {"input": frame}, title, args.dpi)
    scores = ", ".join(f"{n} {s:+.2f}" for n, s in zip(frame.names, frame.scores, strict=True))
    print(f"projection: {directory / 'projection.png'} ({len(frame.words)} words; {scores})")
    return 0
