"""The anchor for accuracy: the Hugging Face token-classification recipe, trained and scored.

`AutoModelForTokenClassification` + `Trainer` + `DataCollatorForTokenClassification`, lr 5e-5,
batch 16, linear schedule, first-piece labels (the `run_ner.py` example), on the same CoNLL-2003
files and encoder as `ner`, for the same epochs and seeds; the last epoch is scored on dev and
test with the metric `ner test` uses (seqeval's conlleval mode). One JSON report a seed:

python -m benchmarks.hf_recipe --seeds 1 2 3 [--epochs 3] [--out runs/hf-recipe] [--smoke]
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from benchmarks.common import CONLL_DIR, conll_labels, describe, encoder_path, quiet
from ner.corpus.reader import read_conll
from ner.evaluation.metrics import entity_counts, entity_scores


def sentences(split: str, limit: int | None = None) -> list[tuple[list[str], list[str]]]:
    """(words, IOB2 tags) of `eng.<split>`."""
    corpus = read_conll(str(CONLL_DIR / f"eng.{split}"))
    return [(s.words, s.tags) for s in corpus.sentences][:limit]


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


def run(seed: int, epochs: float, encoder: str, limit: int | None, out: Path) -> dict:
    """Train the recipe once; dev and test scores of its last epoch, and the wall time. Each
    split's predictions go to `out/seed-S.<split>.txt` (conlleval's `word gold pred`)."""
    from transformers import (
        AutoTokenizer,
        DataCollatorForTokenClassification,
        Trainer,
    )

    labels = conll_labels()
    index = {label: i for i, label in enumerate(labels)}
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    train = sentences("train", limit)
    started = time.perf_counter()
    model = recipe_model(encoder, labels, seed)
    args = recipe_args(f"/tmp/hf-recipe-{seed}", seed, num_train_epochs=epochs)
    collator = DataCollatorForTokenClassification(tokenizer)
    dataset = encode(tokenizer, train, index)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator)
    trainer.train()
    fit_seconds = time.perf_counter() - started
    result = {"seed": seed, "epochs": epochs, "encoder": describe(encoder), "fit_s": fit_seconds}
    for name, split in (("dev", "testa"), ("test", "testb")):
        data = sentences(split, limit)
        pred = word_tags(trainer, tokenizer, data, labels)
        counts = entity_counts(pred, [t for _, t in data])
        result[name] = entity_scores(counts, ["LOC", "MISC", "ORG", "PER"])
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
    args = p.parse_args(argv)
    quiet()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    limit, epochs = (40, 1.0) if args.smoke else (None, args.epochs)
    for seed in args.seeds:
        result = run(seed, epochs, args.encoder or encoder_path(), limit, out)
        (out / f"seed-{seed}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(
            f"seed {seed}: dev F1 {100 * result['dev']['f1']:.2f}, "
            f"test F1 {100 * result['test']['f1']:.2f}, fit {result['fit_s']:.0f} s"
        )


if __name__ == "__main__":
    main()
