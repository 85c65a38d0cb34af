"""The anchor for accuracy: the Hugging Face token-classification recipe, trained and scored.

`AutoModelForTokenClassification` + `Trainer` + `DataCollatorForTokenClassification`, lr 5e-5,
batch 16, linear schedule, first-piece labels (the `run_ner.py` example), on the same CoNLL-2003
files and encoder as `ner`, for the same epochs and seeds; the last epoch is scored on dev and
test with the metric `ner test` uses (seqeval's conlleval mode). One JSON report a seed:

ner bench hf_recipe --seeds 1 2 3 [--epochs 3] [--out runs/hf-recipe] [--smoke]
    [--data-dir DIR] [--lr 1e-4] [--bf16]

`--data-dir` takes any folder `ner fit --data.data_dir` takes (labels from its train file);
`--bf16` trains in bf16 autocast (`TrainingArguments(bf16=True)`), as `ner` does on such CPUs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from benchmarks.common import CONLL_DIR, describe, encoder_path, quiet
from ner.corpus.reader import read_conll
from ner.corpus.schemes import entity_types, label_list
from ner.data.splits import find_split_file
from ner.evaluation.metrics import entity_counts, entity_scores
from ner.utils.errors import NERError


def sentences(data_dir: Path, split: str, limit: int | None = None) -> list[tuple[list, list]]:
    """(words, IOB2 tags) of the `split` (train, val, test) file of `data_dir`."""
    path = find_split_file(str(data_dir), split)
    if path is None:
        raise NERError(
            f"no {split} file (eng.train/testa/testb, train/dev/test)", path=str(data_dir)
        )
    return [(s.words, s.tags) for s in read_conll(path).sentences][:limit]


def encode(tokenizer, data, index):
    """The recipe's features: the first piece of a word carries its label, the rest -100."""
    from datasets import Dataset

    def rows(batch):
        enc = tokenizer(batch["tokens"], is_split_into_words=True, truncation=True)
        enc["labels"] = []
        for i, tags in enumerate(batch["tags"]):
            previous, row = None, []
            for word in enc.word_ids(i):
                row.append(-100 if word is None or word == previous else index[tags[word]])
                previous = word
            enc["labels"].append(row)
        return enc

    columns = {"tokens": [w for w, _ in data], "tags": [t for _, t in data]}
    return Dataset.from_dict(columns).map(rows, batched=True, remove_columns=list(columns))


def recipe_model(encoder: str, labels: list[str], seed: int):
    """`AutoModelForTokenClassification` on `encoder`, its new head seeded by `seed`."""
    import torch
    from transformers import AutoModelForTokenClassification

    torch.manual_seed(seed)
    return AutoModelForTokenClassification.from_pretrained(
        encoder,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )


def recipe_args(output_dir: str, seed: int, **overrides: Any):
    """The recipe's `TrainingArguments` (lr 5e-5, batch 16, linear schedule, CPU), quiet."""
    from transformers import TrainingArguments

    settings: dict[str, Any] = {
        "learning_rate": 5e-5,
        "per_device_train_batch_size": 16,
        "per_device_eval_batch_size": 64,
        "use_cpu": True,
        "report_to": [],
        "save_strategy": "no",
        "eval_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        "seed": seed,
    }
    return TrainingArguments(output_dir=output_dir, **{**settings, **overrides})


def word_tags(trainer, tokenizer, data, labels) -> list[list[str]]:
    """Predicted tags per word: the first piece's argmax; a word cut off by truncation is O."""
    encoded = encode(tokenizer, data, {label: i for i, label in enumerate(labels)})
    logits = trainer.predict(encoded).predictions  # [sentences, pieces, labels]
    out = []
    for i, (words, _) in enumerate(data):
        enc = tokenizer(words, is_split_into_words=True, truncation=True)
        tags, previous = ["O"] * len(words), None
        for position, word in enumerate(enc.word_ids()):
            if word is not None and word != previous:
                tags[word] = labels[int(logits[i][position].argmax())]
            previous = word
        out.append(tags)
    return out


def run(seed: int, epochs: float, encoder: str, limit: int | None, out: Path, **options) -> dict:
    """Train the recipe once; dev and test scores of its last epoch, and the wall time. Each
    split's predictions go to `out/seed-S.<split>.txt` (conlleval's `word gold pred`).
    `options`: data_dir (default CoNLL-2003), lr (5e-5), bf16 (False)."""
    from transformers import (
        AutoTokenizer,
        DataCollatorForTokenClassification,
        Trainer,
    )

    data_dir, lr = Path(options.get("data_dir") or CONLL_DIR), options.get("lr") or 5e-5
    train = sentences(data_dir, "train", limit)
    types = sorted(entity_types(t for _, tags in train for t in tags))
    labels = label_list(types)
    index = {label: i for i, label in enumerate(labels)}
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    started = time.perf_counter()
    model = recipe_model(encoder, labels, seed)
    precision = {"bf16": True} if options.get("bf16") else {}
    args = recipe_args(
        f"/tmp/hf-recipe-{seed}", seed, num_train_epochs=epochs, learning_rate=lr, **precision
    )
    collator = DataCollatorForTokenClassification(tokenizer)
    dataset = encode(tokenizer, train, index)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator)
    trainer.train()
    fit_seconds = time.perf_counter() - started
    result = {"seed": seed, "epochs": epochs, "encoder": describe(encoder), "fit_s": fit_seconds}
    result |= {"data_dir": str(data_dir), "lr": lr, "bf16": bool(options.get("bf16"))}
    for name, split in (("dev", "val"), ("test", "test")):
        data = sentences(data_dir, split, limit)
        pred = word_tags(trainer, tokenizer, data, labels)
        counts = entity_counts(pred, [t for _, t in data])
        result[name] = entity_scores(counts, types)
        write_predictions(out / f"seed-{seed}.{name}.txt", data, pred)
    return result


def write_predictions(path: Path, data, pred: list[list[str]]) -> None:
    """`word gold pred` lines, a blank line after each sentence (IOB2)."""
    with open(path, "w", encoding="utf-8") as handle:
        for (words, gold), tags in zip(data, pred, strict=True):
            handle.writelines(f"{w} {g} {t}\n" for w, g, t in zip(words, gold, tags, strict=True))
            handle.write("\n")


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--out", default="runs/hf-recipe", help="one seed-<N>.json a seed")
    p.add_argument("--encoder", help="encoder directory (default: the bundled MiniLM-L6)")
    p.add_argument("--smoke", action="store_true", help="40 sentences a split, a few steps")
    p.add_argument("--data-dir", help="folder of the splits (default: CoNLL-2003 in ../shared)")
    p.add_argument("--lr", type=float, default=5e-5, help="learning rate (the recipe's: 5e-5)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (fp32 master weights)")
    args = p.parse_args(argv)
    quiet()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    limit, epochs = (40, 1.0) if args.smoke else (None, args.epochs)
    for seed in args.seeds:
        options = {"data_dir": args.data_dir, "lr": args.lr, "bf16": args.bf16}
        result = run(seed, epochs, args.encoder or encoder_path(), limit, out, **options)
        (out / f"seed-{seed}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(
            f"seed {seed}: dev F1 {100 * result['dev']['f1']:.2f}, "
            f"test F1 {100 * result['test']['f1']:.2f}, fit {result['fit_s']:.0f} s"
        )


if __name__ == "__main__":
    main()
