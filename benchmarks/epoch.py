"""One training epoch as users run it: `ner fit` of the offline default vs the HF Trainer recipe.

    ner bench epoch [--sentences 3500] [--smoke] [--json PATH]

Both train one epoch on the same first sentences of eng.train (whole documents, so ours sees its
document context). Ours is the real command, `ner fit -c configs/conll2003-minilm.yaml`, in a
subprocess (automatic precision, its batches, its context), as configured, with
`--data.context_pieces 0`, and with `-c configs/experiment/packed.yaml` (training packs); the
HF recipe (`benchmarks.hf_recipe`) in fp32 and with `bf16=True`.
Each side is timed from its first training batch to the end of its last one: setup (reading,
alignment, the model load) and checkpoint writing are outside the clock on both sides.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytorch_lightning import Callback

from benchmarks.common import (
    CONLL_DIR,
    ROOT,
    describe,
    encoder_path,
    headline,
    native_bf16,
    parse,
    parser,
    report,
)

CONFIG = ROOT / "configs" / "conll2003-minilm.yaml"


class EpochClock(Callback):
    """Writes to `path` the seconds from the first training batch's start to the last one's
    end, the steps, the words trained on and the pieces the encoder computed (`attention_mask`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.start: float | None = None
        self.end = 0.0
        self.steps = self.words = self.pieces = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self.start is None:
            self.start = time.perf_counter()
        self.steps += 1
        self.words += int(batch["word_mask"].sum())
        self.pieces += int(batch["attention_mask"].sum())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.end = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        figures = {"seconds": self.end - (self.start or self.end), "steps": self.steps}
        figures |= {"words": self.words, "pieces": self.pieces}
        figures["precision"] = str(trainer.precision)
        Path(self.path).write_text(json.dumps(figures), encoding="utf-8")


def write_subset(data_dir: Path, sentences: int) -> int:
    """eng.train cut after the document that reaches `sentences` sentences (its own lines, IOB1,
    `-DOCSTART-` kept), plus the first 50 lines of eng.testa/eng.testb (the data module reads
    them; the epoch validates nothing). Returns the sentences written."""
    data_dir.mkdir(parents=True)
    lines = (CONLL_DIR / "eng.train").read_text(encoding="utf-8").splitlines() + [""]
    count = end = 0
    for i, line in enumerate(lines[:-1]):
        if line.startswith("-DOCSTART-") and count >= sentences:
            break
        word = line.strip() and not line.startswith("-DOCSTART-")
        count += bool(word and not lines[i + 1].strip())  # a sentence's last word
        end = i + 1
    (data_dir / "eng.train").write_text("\n".join(lines[:end]) + "\n", encoding="utf-8")
    for split in ("testa", "testb"):
        head = (CONLL_DIR / f"eng.{split}").read_text(encoding="utf-8").splitlines()[:50]
        (data_dir / f"eng.{split}").write_text("\n".join(head) + "\n\n", encoding="utf-8")
    return count


def run_ours(work: Path, data_dir: Path, name: str, extra: list[str]) -> dict:
    """`ner fit` of the offline default for one epoch in `work`; the clock's figures."""
    clock = work / f"{name}.json"
    cmd = [sys.executable, "-m", "ner", "fit", "-c", str(CONFIG), "--run", name]
    cmd += ["--data.data_dir", str(data_dir), "--trainer.max_epochs", "1"]
    cmd += ["--trainer.limit_val_batches", "0", "--trainer.enable_progress_bar", "false"]
    cmd += ["--trainer.callbacks+=benchmarks.epoch.EpochClock"]
    cmd += ["--trainer.callbacks.path", str(clock), *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(clock.read_text(encoding="utf-8"))


def run_hf(data_dir: Path, encoder: str, seed: int, bf16: bool, work: Path) -> dict:
    """The HF Trainer recipe, one epoch on the same sentences; the same clock."""
    from transformers import (
        AutoTokenizer,
        DataCollatorForTokenClassification,
        PrinterCallback,
        Trainer,
        TrainerCallback,
    )

    from benchmarks.common import conll_labels
    from benchmarks.hf_recipe import encode, recipe_args, recipe_model
    from ner.corpus.reader import read_conll

    labels = conll_labels()
    data = [(s.words, s.tags) for s in read_conll(str(data_dir / "eng.train")).sentences]
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    dataset = encode(tokenizer, data, {label: i for i, label in enumerate(labels)})
    figures = {"steps": 0, "words": sum(len(words) for words, _ in data), "pieces": 0}
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *_, **__):
            stamps.append(time.perf_counter()) if not stamps else None

        def on_step_end(self, *_, **__):
            figures["steps"] += 1
            figures["end"] = time.perf_counter()

    class Counted(Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            figures["pieces"] += int(inputs["attention_mask"].sum())
            return super().training_step(model, inputs, num_items_in_batch)

    args = recipe_args(str(work / "hf"), seed, num_train_epochs=1, bf16=bf16)
    trainer = Counted(
        model=recipe_model(encoder, labels, seed),
        args=args,
        train_dataset=dataset,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        callbacks=[Clock()],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    figures["seconds"] = figures.pop("end") - stamps[0]
    figures["precision"] = "bf16" if bf16 else "fp32"
    return figures


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0], __file__)
    p.add_argument("--sentences", type=int, default=3500, help="eng.train sentences (whole docs)")
    args = parse(p, argv)
    sentences = 40 if args.smoke else args.sentences
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        count = write_subset(work / "data", sentences)
        # the default's own encoder name, as users run it; another one (tests) by its folder
        encoder = [] if args.encoder == encoder_path() else ["--model.encoder", args.encoder]
        results["ours, default (context 32)"] = run_ours(work, work / "data", "ctx", encoder)
        results["ours, no context"] = run_ours(
            work, work / "data", "noctx", [*encoder, "--data.context_pieces", "0"]
        )
        packed = ["-c", str(ROOT / "configs" / "experiment" / "packed.yaml")]
        results["ours, packed (experiment packed)"] = run_ours(
            work, work / "data", "packed", [*encoder, *packed]
        )
        # bf16 on a CPU without it natively is emulated, many times slower: no anchor worth
        # timing (a smoke run keeps it: it checks the code path on any CPU)
        for bf16 in (False, True) if native_bf16() or args.smoke else (False,):
            name = f"HF Trainer, {'bf16' if bf16 else 'fp32'}"
            results[name] = run_hf(work / "data", args.encoder, args.seed, bf16, work)
    hf = {k: v["seconds"] for k, v in results.items() if k.startswith("HF")}
    headers = ["recipe", "precision", "steps", "words", "pieces computed", "seconds"]
    headers += ["sentences/s", *(f"vs {k}" for k in hf)]
    rows = []
    for name, r in results.items():
        row = [name, r["precision"], r["steps"], r["words"], r["pieces"], r["seconds"]]
        rows.append(row + [count / r["seconds"], *(s / r["seconds"] for s in hf.values())])
    notes = [
        f"encoder: {describe(args.encoder)}; {count} eng.train sentences (whole documents), one"
        " epoch each side; 'vs' = the anchor's epoch seconds / this row's (>1: faster)",
        "ours: `ner fit -c configs/conll2003-minilm.yaml --trainer.max_epochs 1"
        " --trainer.limit_val_batches 0` (automatic precision, its batches and schedule);"
        " HF: benchmarks.hf_recipe (Trainer, batch 16, lr 5e-5), fp32 (and bf16=True where the"
        " CPU has native bf16)",
        "clock: first training batch's start to last one's end; pieces computed = the sum of"
        " attention_mask (document context and specials included)",
    ]
    rate = {row[0]: row[6] for row in rows}
    ours, anchor = "ours, default (context 32)", "HF Trainer, fp32"
    top = headline(
        f"one training epoch of {count:,} eng.train sentences, as run",
        "sentences/s",
        (ours, rate[ours]),
        (anchor, rate[anchor]),
    )
    report("epoch: one training epoch as run", headers, rows, notes, args, {"raw": results}, top)


if __name__ == "__main__":
    main()
