"""`ner export CKPT OUT`: a checkpoint as a self-contained ONNX folder (`ner.inference.export`).

OUT gets `model.onnx` (emissions of encoder + combiner + pooling + word features + head, dynamic
batch and length axes), `model.int8.onnx` (dynamically quantized; `--no-int8` skips it), the
tokenizer's files, `ner.json` (labels, window settings, inputs, decoding constraints) and the
checkpoint's model card, `README.md`, where `ner fit` wrote one for it (`ner serve OUT` links it
in `/info`). It is assembled beside OUT and renamed onto it at the end: it appears whole or not
at all.
`ner tag OUT` tags with it; docs/export.md shows how to run it with onnxruntime alone.
"""

from __future__ import annotations

import argparse
import time

from ner.cli.main import summary
from ner.cli.model_card import card_of
from ner.inference.backend_table import QUANTIZATIONS
from ner.inference.export import export_onnx
from ner.model.tagger import load_tagger
from ner.utils.extras import require


def parser() -> argparse.ArgumentParser:
    """The options of `ner export`."""
    p = argparse.ArgumentParser(prog="ner export", description=summary("export"))
    p.add_argument("checkpoint", help="a checkpoint written by `ner fit`")
    p.add_argument("output", help="the folder to write (absent or empty)")
    p.add_argument("--no-int8", action="store_true",
                   help=f"skip the int8 graph ({QUANTIZATIONS['int8'].by_backend['onnx']}: what "
                   "`--backend onnx --quantize int8` runs)")  # fmt: skip
    return p


def main(argv: list[str]) -> int:
    """Export; prints the files written."""
    args = parser().parse_args(argv)
    require("export", "ner export")
    started = time.perf_counter()
    tagger = load_tagger(args.checkpoint)  # a bad checkpoint fails before anything is written
    card = card_of(args.checkpoint)  # the card that describes this checkpoint, if any
    folder = export_onnx(
        tagger, args.output, int8=not args.no_int8, source=args.checkpoint, card=card
    )
    for path in sorted(folder.iterdir()):
        size = (
            sum(p.stat().st_size for p in path.rglob("*")) if path.is_dir() else path.stat().st_size
        )
        print(f"{path}  {size / 2**20:.1f} MiB")
    print(f"exported in {time.perf_counter() - started:.0f} s")
    return 0
