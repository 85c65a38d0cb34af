"""What the tests share besides fixtures (those are in conftest.py): a tiny offline BERT and
corpus, the `ner` command run in-process, and small builders of configs, data and models."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
import torch
from datasets import ClassLabel, Dataset, Features, List, Value

from ner.cli.main import main
from ner.data.alignment import Aligned, align_rows
from ner.data.datamodule import NERDataModule
from ner.data.windows import default_windows
from ner.model import checkpoint
from ner.model.tagger import NERTagger
from ner.modules.heads import LinearHead

ROOT = Path(__file__).resolve().parent.parent
CONLL_DIR = ROOT.parent / "shared" / "data" / "conll2003"


TINY_WORDS = (
    "the a of in to and is was on for with by at from john smith mary paris london berlin "
    "germany france acme corp inc bank new york city said he she it they visited works met "
    "today yesterday eu un eu-wide reuters ltd"
).split()


TINY_PIECES = ["##s", "##ed", "##ing", "##er", "##ly", "##a", "##e", "##i", "##o", "##n", "##t"]


def write_tiny_vocab(directory: Path) -> Path:
    """Write a BERT vocab.txt: specials, punctuation, letters and their ## forms, words, pieces."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789")
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += list(".,;:!?'\"()-/&$%")
    tokens += letters + ["##" + ch for ch in letters]
    tokens += [w for w in TINY_WORDS if w not in tokens]
    tokens += [p for p in TINY_PIECES if p not in tokens]
    path = directory / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


def build_tiny_bert(
    directory: Path,
    num_layers: int = 3,
    max_positions: int = 64,
    model_max_length: int | None = None,
) -> Path:
    """Save a tiny random BertModel (hidden 16) and its tokenizer into `directory`."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    vocab = write_tiny_vocab(directory)
    # The path goes positionally: transformers 5 was seen to ignore vocab_file= (PITFALLS.md).
    tokenizer = BertTokenizer(str(vocab), do_lower_case=True)
    assert len(tokenizer) == len(vocab.read_text(encoding="utf-8").split("\n")) - 1
    if model_max_length is not None:
        tokenizer.model_max_length = model_max_length
    tokenizer.save_pretrained(directory)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=max_positions,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(directory)
    return directory


TINY_ENTITIES = {
    "PER": [["john"], ["mary"], ["john", "smith"], ["mary", "smith"]],
    "LOC": [["paris"], ["london"], ["berlin"], ["new", "york"], ["germany"]],
    "ORG": [["acme", "corp"], ["reuters"], ["bank"], ["un"]],
}


TINY_FILLER = (
    "the a of in to and is was on for with by at from said visited works met today".split()
)


def tiny_sentences(n: int, seed: int) -> list[list[tuple[str, str]]]:
    """`n` random sentences of (word, IOB2 tag) with 1-3 entities each, deterministic in `seed`."""
    import random

    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        sentence: list[tuple[str, str]] = []
        for _ in range(rng.randint(1, 3)):
            sentence += [(rng.choice(TINY_FILLER), "O") for _ in range(rng.randint(1, 3))]
            kind = rng.choice(sorted(TINY_ENTITIES))
            words = rng.choice(TINY_ENTITIES[kind])
            sentence += [(w, ("B-" if i == 0 else "I-") + kind) for i, w in enumerate(words)]
        sentence += [(rng.choice(TINY_FILLER), "O"), (".", "O")]
        sentences.append(sentence)
    return sentences


def write_tiny_corpus(path: Path, sentences: list[list[tuple[str, str]]], docs: int = 2) -> Path:
    """Write sentences as a 2-column IOB2 CoNLL file split into `docs` -DOCSTART- documents
    (0: no -DOCSTART- line)."""
    lines: list[str] = []
    per_doc = max(1, len(sentences) // docs) if docs else 0
    for i, sentence in enumerate(sentences):
        if per_doc and i % per_doc == 0:
            lines += ["-DOCSTART- O", ""]
        lines += [f"{w} {t}" for w, t in sentence] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def fit_config(tmp: Path, model_dir: Path, corpus_dir: Path) -> Path:
    config = tmp / "fit.yaml"
    config.write_text(
        f"""
seed_everything: 0
trainer:
  max_steps: 120
  logger: false
  enable_progress_bar: false
  enable_model_summary: false
  num_sanity_val_steps: 0
  check_val_every_n_epoch: 4
  callbacks:
    - class_path: pytorch_lightning.callbacks.ModelCheckpoint
      init_args:
        dirpath: {tmp / "ckpt"}
        filename: best
        monitor: val/f1
        mode: max
        save_weights_only: true
        enable_version_counter: false
    - class_path: ner.model.resume.LastCheckpoint
      init_args:
        dirpath: {tmp / "ckpt"}
model:
  encoder: {model_dir}
  encoder_lr: 3.0e-3
  head_lr: 1.0e-2
  warmup_ratio: 0.0
  head:
    class_path: ner.modules.heads.LinearHead
    init_args:
      dropout: 0.0
data:
  data_dir: {corpus_dir}
  batch_size: 10
""",
        encoding="utf-8",
    )
    return config


def run_ner(args: list[str], capsys) -> tuple[int, str, str]:
    """Run `ner ARGS` in-process; return (exit code, stdout, stderr)."""
    code = 0
    try:
        main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str) -> str:
    assert code == 2
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


TAG_LINES = [
    "John Smith visited Paris today .",
    "the bank said Mary met Reuters",
    "Acme Corp works in Berlin",
    "",
    "she met John in London yesterday",
    "   ",
    "Reuters said the UN is in New York",
    "Mary Smith visited Germany",
    "he works for the bank",
]


HUB_NAMES = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]  # conll2003's order style


def hub_rows(sentences, docs: int):
    """The same sentences as hub rows: `-DOCSTART-` rows and ClassLabel ids in HUB_NAMES order."""
    tokens, tags, per_doc = [], [], max(1, len(sentences) // docs)
    for i, sentence in enumerate(sentences):
        if i % per_doc == 0:
            tokens.append(["-DOCSTART-"])
            tags.append([0])
        tokens.append([w for w, _ in sentence])
        tags.append([HUB_NAMES.index(t) for _, t in sentence])
    features = Features(
        {"tokens": List(Value("string")), "ner_tags": List(ClassLabel(names=HUB_NAMES))}
    )
    return Dataset.from_dict({"tokens": tokens, "ner_tags": tags}, features=features)


CONTEXT = 6


def emissions(batch_model):
    """A `map_batches` function: each sentence's emissions `[words, labels]`."""

    def run(batch):
        out = batch_model(batch).float()
        return [e[:n] for e, n in zip(out, batch["word_mask"].sum(1).tolist(), strict=True)]

    return run


def make_data(model_dir, corpus_dir, tmp_path, **kwargs) -> NERDataModule:
    kwargs.setdefault("batch_size", 4)
    return NERDataModule(
        data_dir=str(corpus_dir), tokenizer=str(model_dir), cache_dir=str(tmp_path), **kwargs
    )


def frozen_tagger(model_dir, labels, combiner=None, **kwargs) -> NERTagger:
    return NERTagger(
        encoder=str(model_dir),
        labels=labels,
        combiner=combiner,
        head=LinearHead(dropout=0.0),
        freeze_encoder=True,
        head_lr=1e-2,
        warmup_ratio=0.0,
        **kwargs,
    )


def trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kwargs,
    )


class Logged(list):
    def __call__(self, message: str) -> None:
        self.append(message)


LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def align_sentences(
    tokenizer,
    documents: list[list[list[str]]],
    max_length: int | None = None,
    stride: int | None = None,
    context_pieces: int = 0,
) -> tuple[list[list[Aligned]], int]:
    """`align_rows` for `[documents][sentences][words]`: an `Aligned` a sentence, per document,
    and the count of zero-piece words (`max_length` None: the tokenizer's default window)."""
    settings = default_windows(tokenizer).overridden(max_length, stride, context_pieces)
    tokens = [sent for doc in documents for sent in doc]
    doc_ids = [d for d, doc in enumerate(documents) for _ in doc]
    rows = align_rows(tokenizer, tokens, doc_ids, settings)
    aligned = map(Aligned, rows["input_ids"], rows["piece_word"], rows["num_pieces"])
    return [[next(aligned) for _ in doc] for doc in documents], sum(rows["zero_piece_words"])


def tiny_tagger_batch(model_dir, seed: int = 0, crf: bool = True) -> tuple[NERTagger, dict]:
    """An untrained tagger (its new layers drawn with `seed`) with every part that holds linear
    layers (a CRF head unless `crf=False`, casing and character features) on `model_dir`, in
    eval mode, and a collated batch of three sentences."""
    from ner.inference.routine import map_batches
    from ner.modules.word_features import WordFeatures

    torch.manual_seed(seed)
    model = NERTagger(
        encoder=str(model_dir),
        labels=LABELS,
        head=LinearHead(crf=crf),
        word_features=WordFeatures(casing_dim=4, char_dim=8, char_filters=6),
    ).eval()
    batches: list[dict] = []

    def keep(batch: dict) -> list[None]:
        batches.append(batch)
        return [None] * len(batch["sent_id"])

    words = [["Anna", "lives", "in", "Paris", "."], ["U.S.", "troops"], ["ok"]]
    list(map_batches(model, keep, words, bf16=False))
    return model, batches[0]


def decisive(model: NERTagger, seed: int) -> NERTagger:
    """`model` with a random, decisive classifier (an untrained one tags everything alike) and,
    with a CRF head, random transitions, all drawn with `seed`."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        weight = model.head.classifier.weight
        weight.copy_(4 * torch.randn(weight.shape, generator=generator))
        if model.head.crf_layer is not None:
            for param in model.head.crf_layer.parameters():
                param.copy_(torch.randn(param.shape, generator=generator))
    return model


def save_checkpoint(model: NERTagger, path: Path) -> str:
    """Save `model` as a checkpoint of this package (what `load_tagger` reads); its path."""
    torch.save({"state_dict": model.state_dict(), "ner": checkpoint.pack(model)}, path)
    return str(path)
