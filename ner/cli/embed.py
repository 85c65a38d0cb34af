"""`ner embed INPUT --output DIR`: word vectors of chosen hidden states of an encoder or of a
trained checkpoint (then also its combiner's output), for every word of a text or CoNLL input.

DIR gets `embeddings.npy` (`[words, layers, hidden]`, or `[words, dim]` when combined), written
through a memory map so memory does not grow with the input, `combiner.npy` (`[words, dim]`,
checkpoints only), `words.jsonl` (document, sentence, word index, word, character offsets, gold
tag when the input has one) and `meta.json`. The folder is assembled beside DIR and renamed onto
it at the end: it appears whole or not at all.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import IO, Any

import numpy as np
from tqdm.auto import tqdm

from ner.cli.main import summary
from ner.corpus.inputs import KINDS, PredictInput, read_inputs
from ner.corpus.reader import read_conll
from ner.data.pretrained import BUNDLED_ENCODER
from ner.layer_analysis.embed import COMBINE, WordStates, check_layers, combine, iter_word_states
from ner.model.tagger import load_tagger
from ner.modules.pooling import MODES
from ner.utils.errors import NERError
from ner.utils.files import atomic_folder


def parser() -> argparse.ArgumentParser:
    """The options of `ner embed`."""
    p = argparse.ArgumentParser(prog="ner embed", description=summary("embed"))
    p.add_argument("input", help="text (one document a line) or CoNLL file; - for stdin")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--encoder", help=f"hub name or path (default: {BUNDLED_ENCODER})")
    source.add_argument("--ckpt_path", help="a trained checkpoint (adds its combiner's output)")
    p.add_argument("--layers", default="all", help="all, or hidden states like 0,4,-1")
    p.add_argument("--combine", choices=COMBINE, default="none", help="over the chosen layers")
    p.add_argument("--pooling", choices=MODES, help="default: the checkpoint's, else first")
    p.add_argument("--dtype", choices=("float16", "float32"), default="float16")
    p.add_argument("--input-format", choices=KINDS, default="auto")
    p.add_argument("--output", required=True, help="a new (or empty) folder")
    p.add_argument("--batch-size", type=int, default=64, help="sentences a batch at most")
    return p


def _layers(text: str) -> list[int] | None:
    if text == "all":
        return None
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise NERError(f"{text!r} is not 'all' or a list like 0,4,-1", path="--layers") from None


def _model(args: argparse.Namespace) -> WordStates:
    """The encoder of a checkpoint (its pooling, unless `--pooling`), or a plain encoder."""
    if args.ckpt_path:
        return WordStates.of_tagger(load_tagger(args.ckpt_path), args.pooling).eval()
    return WordStates.of_encoder(args.encoder or BUNDLED_ENCODER, args.pooling or "first")


def _gold(inp: PredictInput) -> list[list[str]] | None:
    """Gold IOB2 tags of a CoNLL file input whose last column holds tags, else None."""
    if inp.kind != "conll" or inp.name == "<stdin>":
        return None
    try:
        return [s.tags for s in read_conll(inp.name).sentences]
    except NERError:
        return None  # no tag column: words only


def _word_records(inp: PredictInput, gold: list[list[str]] | None):
    """One `words.jsonl` record a word, in row order: where it is (document, sentence and word
    index), its text and offsets, its own input line and its sentence's first and last."""
    conll = inp.kind == "conll"  # a CoNLL word has its own line; a text line holds its words
    for s, (passage, doc) in enumerate(zip(inp.passages, inp.doc_ids, strict=True)):
        last = passage.line + (len(passage.words) - 1 if conll else 0)
        for w, (word, (start, end)) in enumerate(zip(passage.words, passage.offsets, strict=True)):
            record: dict[str, Any] = {
                "document": doc, "sentence": s, "word": w, "text": word, "start": start,
                "end": end, "line": passage.line + w if conll else passage.line,
                "sentence_lines": [passage.line, last],
            }  # fmt: skip
            if gold is not None:
                record["gold"] = gold[s][w]
            yield record


def _write(
    stage: Path, model: WordStates, inp: PredictInput, args: argparse.Namespace
) -> dict[str, Any]:
    layers = check_layers(model, _layers(args.layers))
    total = sum(len(p.words) for p in inp.passages)
    if total == 0:
        raise NERError("no words to embed", path=inp.name)
    with_combiner = bool(args.ckpt_path)
    arrays: dict[str, np.memmap] = {}
    row = 0
    states = iter_word_states(model, (p.words for p in inp.passages), inp.doc_ids, layers,
                              with_combiner, batch_size=args.batch_size)  # fmt: skip
    with open(stage / "words.jsonl", "w", encoding="utf-8") as words:
        _write_words(words, inp, _gold(inp))
    for vectors, mixed in tqdm(states, total=len(inp.passages), unit="sent", delay=2.0):
        parts = {"embeddings": combine(vectors, args.combine), "combiner": mixed}
        for name, part in parts.items():
            if part is None:
                continue
            if name not in arrays:  # shapes are known from the first sentence on
                shape = (total, *part.shape[1:])
                arrays[name] = np.lib.format.open_memmap(
                    stage / f"{name}.npy", mode="w+", dtype=args.dtype, shape=shape
                )
            arrays[name][row : row + len(part)] = part
        row += len(vectors)
    for array in arrays.values():
        array.flush()
    return {name: list(array.shape) for name, array in arrays.items()} | {"layers": layers}


def _write_words(handle: IO[str], inp: PredictInput, gold: list[list[str]] | None) -> None:
    for record in _word_records(inp, gold):
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def joined_layers(argv: list[str]) -> list[str]:
    """`--layers -4,-1` as `--layers=-4,-1`: argparse reads a value that starts with `-` (and
    is not one number) as an option."""
    out: list[str] = []
    for word in argv:
        if out and out[-1] == "--layers" and word.startswith("-"):
            out[-1] = f"--layers={word}"
        else:
            out.append(word)
    return out


def main(argv: list[str]) -> int:
    """Embed; the output folder appears whole or not at all."""
    args = parser().parse_args(joined_layers(argv))
    layers = _layers(args.layers)  # a bad list fails before the model loads
    model = _model(args)
    model.computing_up_to(max(check_layers(model, layers)))
    inp = read_inputs(args.input, args.input_format)
    with atomic_folder(args.output) as stage:
        shapes = _write(stage, model, inp, args)
        meta = {
            "encoder": model.name,
            "checkpoint": args.ckpt_path,
            "input": inp.name,
            "layers": shapes.pop("layers"),
            "combine": args.combine,
            "pooling": model.pooling.mode,
            "dtype": args.dtype,
            "shapes": shapes,
            "windows": model.window_settings.as_dict(),
        }
        (stage / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    print(f"embeddings: {args.output}/embeddings.npy {shapes['embeddings']}")
    return 0
