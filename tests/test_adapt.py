"""`ner adapt`: masked-LM blocks, whole-word masking, and the encoder folder it writes."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import one_line_error, run_ner, tiny_sentences, write_tiny_corpus

from ner.cli import adapt
from ner.corpus.reader import read_conll
from ner.data.mlm import WholeWordMasking, piece_blocks
from ner.modules.encoder import load_encoder


@pytest.fixture
def corpus_file(tmp_path):
    return write_tiny_corpus(tmp_path / "train.txt", tiny_sentences(12, seed=3), docs=3)


def doc_pieces(corpus, tokenizer) -> list[list[int]]:
    """Independent answer: each document's words joined as text, tokenised in one call."""
    out = []
    for doc in corpus.documents:
        text = " ".join(w for s in doc.sentences for w in s.words)
        out.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return out


def test_blocks_cut_each_document_and_lose_no_piece(corpus_file, tiny_tokenizer):
    corpus = read_conll(corpus_file)
    blocks = piece_blocks(corpus, tiny_tokenizer, block=16)
    cls, sep = tiny_tokenizer.cls_token_id, tiny_tokenizer.sep_token_id
    assert all(len(b["input_ids"]) <= 16 for b in blocks)
    assert all(b["input_ids"][0] == cls and b["input_ids"][-1] == sep for b in blocks)
    assert all(len(b["offset_mapping"]) == len(b["input_ids"]) for b in blocks)
    inner = [b["input_ids"][1:-1] for b in blocks]
    # the blocks of document d, in order, hold exactly its pieces: no block spans two documents
    expected, got, i = doc_pieces(corpus, tiny_tokenizer), [], 0
    for pieces in expected:
        joined: list[int] = []
        while len(joined) < len(pieces):
            joined += inner[i]
            i += 1
        got.append(joined)
    assert got == expected and i == len(blocks)


def test_whole_word_masking_masks_all_pieces_of_a_word_or_none(tiny_tokenizer, tmp_path):
    # "visitings" and "smithed" split into several pieces in the tiny vocabulary
    words = ["john", "visitings", "smithed", "paris"] * 3  # 38 pieces: one block
    path = tmp_path / "words.txt"
    path.write_text("\n".join(f"{w} O" for w in words) + "\n", encoding="utf-8")
    blocks = piece_blocks(read_conll(path), tiny_tokenizer, block=64)
    word_ids = tiny_tokenizer(words, is_split_into_words=True).word_ids()
    assert len(blocks) == 1 and len(blocks[0]["input_ids"]) == len(word_ids)
    short = {**blocks[0], **{k: v[:9] for k, v in blocks[0].items()}}  # a shorter block: padded
    masked = 0
    for seed in range(20):
        batch = WholeWordMasking(tiny_tokenizer, probability=0.3, seed=seed)([blocks[0], short])
        assert batch["input_ids"].shape == batch["labels"].shape == (2, len(blocks[0]["input_ids"]))
        chosen = (batch["labels"][0] != -100).tolist()
        for w in set(word_ids) - {None}:
            picks = {chosen[i] for i, wid in enumerate(word_ids) if wid == w}
            assert len(picks) == 1, f"word {words[w]!r} partly masked"
        assert not chosen[0] and not chosen[-1]  # [CLS], [SEP]
        assert (batch["labels"][1][9:] == -100).all()  # padding is never a target
        masked += sum(chosen)
    assert masked > 0


def test_adapt_writes_an_encoder_that_loads_and_has_learned(
    corpus_file, tiny_model_dir, tmp_path, capsys
):
    out = tmp_path / "encoders" / "adapted"  # a parent that does not exist yet (README's)
    args = ["adapt", str(corpus_file), "--output", str(out), "--encoder", str(tiny_model_dir),
            "--dev_file", str(corpus_file), "--epochs", "2", "--batch_size", "4", "--block", "16",
            "--lr", "1e-3", "--precision", "32-true"]  # fmt: skip
    code, stdout, err = run_ner(args, capsys)
    assert code == 0, err
    summary = json.loads((out / "adapt.json").read_text())
    assert summary == json.loads(stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2 * -(-summary["blocks"] // 4) and "val/loss" in summary
    epochs = [line for line in err.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 1/2", "epoch 2/2"]
    assert "val/loss" in epochs[-1] and "LOAD REPORT" not in err
    adapted, original = load_encoder(str(out)), load_encoder(str(tiny_model_dir))
    before, after = original.state_dict(), adapted.state_dict()
    assert before.keys() == after.keys()  # a whole encoder, nothing of the masked-LM head
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert "embeddings.word_embeddings.weight" in changed and len(changed) > len(before) // 2


def test_adapt_refuses_a_full_output_folder_before_training(corpus_file, tiny_model_dir,
                                                            tmp_path, capsys):  # fmt: skip
    out = tmp_path / "adapted"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, err = run_ner(["adapt", str(corpus_file), "--output", str(out), "--encoder",
                            str(tiny_model_dir)], capsys)  # fmt: skip
    assert "not an empty folder" in one_line_error(code, err)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_adapt_bad_input_is_a_one_line_error(tiny_model_dir, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"caf\xe9 O\n")
    out = tmp_path / "adapted"
    code, _, err = run_ner(["adapt", str(bad), "--output", str(out), "--encoder",
                            str(tiny_model_dir)], capsys)  # fmt: skip
    assert "bad.txt" in one_line_error(code, err)
    assert not out.exists()


def test_dev_masks_are_the_same_every_epoch_and_training_masks_are_not(
    corpus_file, tiny_tokenizer, tmp_path
):
    args = adapt.parser().parse_args(
        [
            str(corpus_file),
            "--output",
            str(tmp_path / "x"),
            "--dev_file",
            str(corpus_file),
            "--batch_size",
            "4",
            "--block",
            "16",
        ]  # fmt: skip
    )
    torch.manual_seed(0)
    train, dev = adapt.loaders(args, tiny_tokenizer)
    first, second = list(dev), list(dev)
    assert len(first) == -(-len(piece_blocks(read_conll(corpus_file), tiny_tokenizer, 16)) // 4)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a["labels"], b["labels"]) and torch.equal(a["input_ids"], b["input_ids"])
    assert any((a["labels"] != -100).any() for a in first)
    masks = [
        sorted(tuple(b["labels"][i].tolist()) for b in train for i in range(len(b["labels"])))
        for _ in range(2)
    ]
    assert masks[0] != masks[1]  # each epoch masks its words afresh


def test_adapt_fits_blocks_to_an_encoder_with_fewer_positions(
    corpus_file, tiny_model_dir, tmp_path, capsys
):
    # regression: the default 128-piece block overran the tiny BERT's 64 positions (a
    # RuntimeError from the position embeddings, found by the README's command)
    out = tmp_path / "adapted"
    args = ["adapt", str(corpus_file), "--output", str(out), "--encoder", str(tiny_model_dir),
            "--epochs", "1", "--precision", "32-true"]  # fmt: skip
    code, _, err = run_ner(args, capsys)
    assert code == 0, err
    assert "--block 128 > the encoder's 64 positions: 64" in err
    assert json.loads((out / "adapt.json").read_text())["settings"]["block"] == 64
