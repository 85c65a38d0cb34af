"""A tiny random MPNet (the architecture of the base encoder, all-mpnet-base-v2) with its
tokenizer, built offline: no token type ids, `<pad>` = 1, positions after the padding index,
relative position buckets (32: transformers' MPNet reads that many whatever its config says)."""

from __future__ import annotations

from pathlib import Path

from helpers import TINY_PIECES, TINY_WORDS

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]"]  # as all-mpnet-base-v2's vocab.txt opens


def write_mpnet_vocab(directory: Path) -> Path:
    """An MPNet vocab.txt: its specials, punctuation, letters and their ## forms, words, pieces,
    `<mask>` last (as in the real one)."""
    directory.mkdir(parents=True, exist_ok=True)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789")
    tokens = [*SPECIALS, *".,;:!?'\"()-/&$%", *letters, *("##" + ch for ch in letters)]
    tokens += [w for w in TINY_WORDS if w not in tokens]
    tokens += [p for p in TINY_PIECES if p not in tokens]
    path = directory / "vocab.txt"
    path.write_text("\n".join([*tokens, "<mask>"]) + "\n", encoding="utf-8")
    return path


def build_tiny_mpnet(
    directory: Path, num_layers: int = 3, hidden: int = 16, heads: int = 2, max_positions: int = 64
) -> Path:
    """Save a random MPNetModel and its tokenizer into `directory`."""
    import torch
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizer

    vocab = write_mpnet_vocab(directory)
    tokenizer = MPNetTokenizer(str(vocab), do_lower_case=True, unk_token="[UNK]")
    assert len(tokenizer) == len(vocab.read_text(encoding="utf-8").split("\n")) - 1
    assert tokenizer.pad_token_id == 1 and "token_type_ids" not in tokenizer("a")
    tokenizer.model_max_length = max_positions
    tokenizer.save_pretrained(directory)
    config = MPNetConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=num_layers,
        num_attention_heads=heads, intermediate_size=32, pad_token_id=1,
        max_position_embeddings=max_positions + 2, relative_attention_num_buckets=32,
    )  # fmt: skip
    torch.manual_seed(0)
    MPNetModel(config).save_pretrained(directory)
    return directory
