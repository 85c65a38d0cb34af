"""Tagging eng.testb as raw text: `NERTagger.predict` vs the HF token-classification pipeline.

    ner bench predict [--ckpt PATH] [--documents [--context N]] [--smoke] [--json PATH]

Each side runs in its own subprocess, so the peak RSS figures do not mix.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.common import (
    CONLL_DIR,
    ROOT,
    build_tagger,
    describe,
    headline,
    load_sentences,
    native_bf16,
    parse,
    parser,
    report,
    rss_mib,
)

# our sides: (backend, quantize, bf16 autocast) of `NERTagger.accelerate` / `predict`
OURS = {
    "ours, bf16 autocast": ("torch", None, True),
    "ours, fp32": ("torch", None, False),
    "ours, fp32, unpacked batches": ("torch", None, False),  # packed=False: length-sorted only
    "ours, torchao int8": ("torch", "int8", False),
    "ours, onnx fp32": ("onnx", None, False),
    "ours, onnx int8": ("onnx", "int8", False),
}
SIDES = (*OURS, "HF pipeline, fp32")
WARMUP_TEXTS = 64


def export_hf(tagger, directory: Path) -> bool:
    """Save an AutoModelForTokenClassification with the tagger's encoder weights to `directory`.

    The classifier is the tagger's own if the tagger is a plain linear tagger (last layer, first
    piece, softmax head); else a fresh one of the same shape. Returns whether it was copied.
    """
    from transformers import AutoModelForTokenClassification

    from ner.modules.combiners import LastLayer
    from ner.modules.heads import LinearHead

    config = tagger.encoder.config
    config.num_labels = len(tagger.labels)
    config.id2label = dict(enumerate(tagger.labels))
    config.label2id = {label: i for i, label in enumerate(tagger.labels)}
    model = AutoModelForTokenClassification.from_config(config)
    getattr(model, model.base_model_prefix).load_state_dict(tagger.encoder.state_dict())
    plain = (
        type(tagger.head) is LinearHead
        and not tagger.head.crf
        and isinstance(tagger.combiner, LastLayer)
        and tagger.pooling.mode == "first"
        and tagger.word_features is None
    )
    if plain:
        model.classifier.load_state_dict(tagger.head.classifier.state_dict())
    model.save_pretrained(directory)
    tagger.tokenizer.save_pretrained(directory)
    return plain


def head_checksum(tagger) -> float:
    """A fingerprint of the head's weights (parent and child must build the same tagger)."""
    return float(sum(p.detach().double().sum() for p in tagger.head.parameters()))


def child(side: str, texts: list, args) -> dict:
    """Time one side on `texts` after a warm-up, twice (the first pass also pays for what a
    fresh process builds once, e.g. oneDNN's kernels for each new batch shape); report its
    sentences/s and peak RSS. `args.doc_ids`: texts are word lists of those documents."""
    doc_ids = args.doc_ids
    if side.startswith("ours"):
        from ner.inference.backends import accelerate

        tagger = build_tagger(args.encoder, args.ckpt, args.seed)
        checksum = head_checksum(tagger)
        backend, quantize, bf16 = OURS[side]
        # an ONNX export is made once per model and cached: made here, before the clock
        accelerate(tagger, backend, quantize, folder=Path(args.hf_dir).parent / "onnx")
        options: dict = {"bf16": bf16}
        if "unpacked" in side:
            options["packed"] = False
        if args.context is not None:
            options["settings"] = replace(tagger.window_settings, context_pieces=args.context)

        def run(batch: list, ids: list[int] | None) -> list:
            return tagger.predict(batch, doc_ids=ids, **options)

    else:
        from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

        checksum = None
        pipe = pipeline(
            "token-classification",
            model=AutoModelForTokenClassification.from_pretrained(args.hf_dir),
            tokenizer=AutoTokenizer.from_pretrained(args.hf_dir),
            aggregation_strategy="first",
            batch_size=32,
            device="cpu",
        )

        def run(batch: list, ids: list[int] | None) -> list:  # no document context
            return pipe([t if isinstance(t, str) else " ".join(t) for t in batch])

    if "bf16" in side and args.bf16_limit:
        texts = texts[: args.bf16_limit]
    doc_ids = doc_ids[: len(texts)] if doc_ids else None
    run(texts[:WARMUP_TEXTS], doc_ids[:WARMUP_TEXTS] if doc_ids else None)
    loaded = rss_mib(peak=False)
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        out = run(texts, doc_ids)
        seconds.append(time.perf_counter() - start)
    return {
        "side": side,
        "seconds": seconds[0],
        "second_pass_seconds": seconds[1],
        "sentences": len(out),
        "entities": sum(len(x) for x in out),
        "loaded_rss_mib": loaded,
        "peak_rss_mib": rss_mib(peak=True),
        "checksum": checksum,
    }


def spawn(sides: list[str], args, texts_file: Path, hf_dir: Path) -> list[dict]:
    """Run `sides` in one fresh interpreter; its last line per side is `RESULT <json>`."""
    cmd = [sys.executable, "-m", "benchmarks.predict", "--texts", str(texts_file)]
    cmd += ["--hf-dir", str(hf_dir), "--seed", str(args.seed), "--encoder", args.encoder]
    cmd += ["--ckpt", args.ckpt] if args.ckpt else []
    cmd += ["--bf16-limit", str(args.bf16_limit)] if args.bf16_limit else []
    cmd += ["--documents"] if args.documents else []
    cmd += ["--context", str(args.context)] if args.context is not None else []
    for side in sides:
        cmd += ["--child", side]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    lines = proc.stdout.splitlines()
    return [json.loads(ln.removeprefix("RESULT ")) for ln in lines if ln.startswith("RESULT ")]


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0], __file__)
    p.add_argument("--ckpt", help="a trained checkpoint (default: an untrained tagger)")
    p.add_argument("--limit", type=int, help="only the first N eng.testb sentences")
    p.add_argument(
        "--bf16-limit", type=int, help="sentences for the bf16 side (default: all; 300 on a CPU"
        " without native bf16, where it is far slower than fp32)"
    )  # fmt: skip
    p.add_argument(
        "--documents", action="store_true", help="tag eng.testb as CoNLL documents (word lists"
        " with their document ids, so ours adds the checkpoint's document context)"
    )  # fmt: skip
    p.add_argument("--context", type=int, help="ours: context pieces a side (default: the model's)")
    p.add_argument("--child", action="append", choices=SIDES, help=argparse_hidden())
    p.add_argument("--texts", help=argparse_hidden())
    p.add_argument("--hf-dir", help=argparse_hidden())
    args = parse(p, argv)
    if args.child:
        texts, args.doc_ids = json.loads(Path(args.texts).read_text(encoding="utf-8"))
        for side in args.child:
            print("RESULT " + json.dumps(child(side, texts, args)), flush=True)
        return
    limit = 8 if args.smoke else args.limit
    if args.bf16_limit is None and not native_bf16():
        args.bf16_limit = 300
    texts, doc_ids = inputs(args.documents, limit)
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps([texts, doc_ids]), encoding="utf-8")
        tagger = build_tagger(args.encoder, args.ckpt, args.seed)
        copied = export_hf(tagger, Path(tmp) / "hf")
        checksum = head_checksum(tagger)
        del tagger
        # smoke: one interpreter for all sides (its RSS figures mix; it checks the code path)
        groups = [list(SIDES)] if args.smoke else [[s] for s in SIDES]
        results = [r for group in groups for r in spawn(group, args, texts_file, Path(tmp) / "hf")]
    for r in results:
        if r["checksum"] is not None and abs(r["checksum"] - checksum) > 1e-6:
            raise RuntimeError(f"{r['side']}: the subprocess built a different tagger")
    hf = results[-1]
    hf_rate = hf["sentences"] / hf["seconds"]
    hf_rate2 = hf["sentences"] / hf["second_pass_seconds"]
    headers = ["side", "sentences", "seconds", "sentences/s", "vs HF", "2nd pass sentences/s"]
    headers += ["2nd pass vs HF", "peak RSS MiB", "vs HF RSS"]
    rows = [
        [
            r["side"],
            r["sentences"],
            r["seconds"],
            r["sentences"] / r["seconds"],
            r["sentences"] / r["seconds"] / hf_rate,
            r["sentences"] / r["second_pass_seconds"],
            r["sentences"] / r["second_pass_seconds"] / hf_rate2,
            r["peak_rss_mib"],
            r["peak_rss_mib"] / hf["peak_rss_mib"],
        ]
        for r in results
    ]
    weights = "the tagger's head" if copied else "a fresh classifier (the head is not plain linear)"
    what = (
        f"as CoNLL documents ({len(set(doc_ids))} documents; ours with"
        f" {'the model' + chr(39) + 's' if args.context is None else args.context} context"
        " pieces, HF each sentence alone)"
        if doc_ids
        else "as raw text (words joined by spaces)"
    )
    notes = [
        f"{len(texts)} eng.testb sentences {what}, after a warm-up on the first"
        f" {WARMUP_TEXTS}; each side tags them twice (2nd pass: shapes and caches warm)"
        + (f"; bf16: the first {args.bf16_limit} only" if args.bf16_limit else ""),
        f"model: {args.ckpt or f'untrained tagger on {describe(args.encoder)} (seeded)'}; the HF"
        f" model has the same encoder weights and {weights}",
        "ours: tagger.predict defaults (short sentences packed into rows of 64 pieces, the rest"
        " length-bucketed; constrained Viterbi); 'unpacked': length-bucketed batches only;"
        " bf16 via `NERTagger.predict(texts, bf16=True)` (ner.utils.precision.autocast); int8 and"
        " onnx via `tagger.accelerate(backend, quantize)` (ner.inference.backends; the ONNX"
        " export is made before the clock starts, as `ner tag` caches it)",
        "HF: pipeline('token-classification', aggregation_strategy='first', batch_size=32),"
        " input order, argmax",
        "peak RSS: VmHWM of each side's own process (imports + model + tagging);"
        + (" smoke: one process for all sides, so it mixes" if args.smoke else ""),
    ]
    # the headline is what `ner tag` runs by default here: bf16 where the CPU has it natively
    default = "ours, bf16 autocast" if native_bf16() else "ours, fp32"
    chosen = next(row for row in rows if row[0] == default)
    top = headline(
        f"tagging eng.testb {'as CoNLL documents' if doc_ids else 'as raw text'}"
        " (ner tag's default)",
        "sentences/s, 1st pass",
        (chosen[0], chosen[3]),
        (rows[-1][0], hf_rate),
    )
    variant = "documents" if args.documents else ""
    report("predict: tagging eng.testb", headers, rows, notes, args, {"raw": results}, top, variant)


def inputs(documents: bool, limit: int | None) -> tuple[list, list[int] | None]:
    """eng.testb as raw texts, or as word lists with their document ids (`documents`)."""
    if not documents:
        return [" ".join(words) for words, _ in load_sentences("testb", limit)], None
    from ner.corpus.reader import read_conll

    corpus = read_conll(str(CONLL_DIR / "eng.testb"))
    return [s.words for s in corpus.sentences][:limit], corpus.doc_ids[:limit]


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
