"""`ner tag CKPT [FILE|-]`: tag text or CoNLL with a checkpoint, streaming text input."""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterable

from tqdm.auto import tqdm

from ner.cli.main import summary
from ner.corpus.inputs import KINDS, decode_lines, open_input, read_conll_input, text_passages
from ner.corpus.outputs import TAG_FORMATS, write_predictions
from ner.inference.backend_table import add_backend_arguments
from ner.inference.routine import Tagged, iter_tags
from ner.serving.loader import load_model


def parser() -> argparse.ArgumentParser:
    """The options of `ner tag`."""
    p = argparse.ArgumentParser(prog="ner tag", description=summary("tag"))
    p.add_argument("checkpoint", help="a checkpoint, or a folder written by `ner export`")
    p.add_argument("input", nargs="?", default="-", help="text or CoNLL file; - for stdin")
    p.add_argument(
        "--format", choices=TAG_FORMATS, default="jsonl",
        help="output format; spacy, doccano, label-studio: pre-annotations to import into those"
        " tools (label-studio: one JSON list of tasks with the model's predictions)",
    )  # fmt: skip
    p.add_argument(
        "--input-format",
        choices=KINDS,
        default="auto",
        help="auto: by extension (.conll .conllu .iob .bio .tsv / .txt), else by content",
    )
    p.add_argument("--output", default=None, help="output file (default: stdout)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences a batch at most")
    p.add_argument("--device", default="auto", help="auto (a GPU if there is one), cpu, cuda:N")
    add_backend_arguments(p)
    p.add_argument(
        "--ensemble", nargs="+", default=[], metavar="CKPT",
        help="more checkpoints of the same recipe (e.g. other seeds): their tag probabilities are"
        " averaged with the first one's (torch backend)",
    )  # fmt: skip
    p.add_argument(
        "--consistency", type=float, default=None, metavar="W",
        help="weight of document-level consistency: a capitalised word repeated in a -DOCSTART-"
        " document, where the model is unsure of it, leans to the types of its other occurrences"
        " (default: the checkpoint's setting, `model.consistency`; 0: off)",
    )  # fmt: skip
    return p


def _progress(tagged: Iterable[Tagged]) -> Iterable[Tagged]:
    # no total when streaming; the delay keeps it off for small inputs
    return tqdm(tagged, unit="sent", delay=2.0)


def main(argv: list[str]) -> int:
    """Tag; an output file appears whole or not at all (on stdout, records before an error
    stay). Text input is read, tagged and written a chunk at a time."""
    args = parser().parse_args(argv)
    # a bad checkpoint fails before any input is read
    tagger = load_model(args.checkpoint, args.backend, args.quantize, args.device, args.ensemble)
    with open_input(args.input, args.input_format) as (name, kind, raw):
        corpus, doc_ids = None, None
        if kind == "conll":
            inp = read_conll_input(name, raw)
            passages, corpus, doc_ids = iter(inp.passages), inp.corpus, inp.doc_ids
        else:
            passages = text_passages(decode_lines(raw, name))
        # two views of one lazy stream: tagging runs at most a chunk ahead of the writer
        passages, ahead = itertools.tee(passages)
        words = (p.words for p in ahead)
        tagged = iter_tags(
            tagger, words, consistency=args.consistency, doc_ids=doc_ids, batch_size=args.batch_size
        )
        write_predictions(
            passages, _progress(tagged), args.format, args.output, corpus, name, args.checkpoint
        )
    return 0
