"""Text for masked-LM adaptation of an encoder (`ner adapt`): a CoNLL file's words -> blocks of
word pieces, each `[CLS] pieces [SEP]`, cut from the running text of one document.

The words are tokenised as the tagger tokenises them (`is_split_into_words`), so the encoder
adapts to the very pieces it will later tag. Each block carries the offsets the whole-word
collator (`transformers.DataCollatorForLanguageModeling(whole_word_mask=True)`) reads to find
where words start: a name split into pieces is masked whole or not at all.
"""

from __future__ import annotations

from typing import Any

from ner.corpus.reader import Corpus
from ner.data.alignment import special_tokens
from ner.utils.errors import NERError


def document_pieces(corpus: Corpus, tokenizer) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """Each document's pieces and their offsets within their words, in reading order. A file
    without `-DOCSTART-` is one running text (its sentences stay in file order)."""
    out = []
    for doc in corpus.documents:
        words = [s.words for s in doc.sentences if s.words]
        if not words:
            continue
        enc = tokenizer(words, is_split_into_words=True, add_special_tokens=False,
                        return_offsets_mapping=True)  # fmt: skip
        ids = [i for sentence in enc["input_ids"] for i in sentence]
        offsets = [tuple(o) for sentence in enc["offset_mapping"] for o in sentence]
        out.append((ids, offsets))
    return out


def piece_blocks(corpus: Corpus, tokenizer, block: int = 128) -> list[dict[str, list]]:
    """Blocks of at most `block` pieces (special tokens included), never across documents:
    `input_ids`, `offset_mapping` (special tokens at (0, 0)) and `special_tokens_mask`."""
    if block < 8:
        raise NERError(f"block of {block} pieces: at least 8", path="block")
    prefix, suffix = special_tokens(tokenizer)
    inner = block - len(prefix) - len(suffix)
    blocks = []
    for ids, offsets in document_pieces(corpus, tokenizer):
        for start in range(0, len(ids), inner):
            chunk = ids[start : start + inner]
            special = [1] * len(prefix) + [0] * len(chunk) + [1] * len(suffix)
            blocks.append({
                "input_ids": prefix + chunk + suffix,
                "offset_mapping": [(0, 0)] * len(prefix) + offsets[start : start + inner]
                + [(0, 0)] * len(suffix),
                "special_tokens_mask": special,
            })  # fmt: skip
    if not blocks:
        raise NERError("no words to adapt on", path=corpus.path)
    return blocks


class WholeWordMasking:
    """`transformers.DataCollatorForLanguageModeling` with whole-word masking over blocks of
    different lengths: it pads `input_ids` and `special_tokens_mask` but not the offsets it
    reads, so they are padded here (right, as the tokenizer pads) before it runs.

    Args:
        tokenizer: the encoder's tokenizer (its mask token and padding).
        probability: share of words masked, each of their pieces replaced by [MASK] (the
            collator does no random replacement with whole words).
        seed: the masks' random seed (None: torch's global generator).
    """

    def __init__(self, tokenizer, probability: float = 0.15, seed: int | None = None):
        from transformers import DataCollatorForLanguageModeling

        self.collator = DataCollatorForLanguageModeling(
            tokenizer,
            whole_word_mask=True,
            mlm_probability=probability,
            seed=seed,
            mask_replace_prob=1.0,
            random_replace_prob=0.0,
        )

    def __call__(self, blocks: list[dict[str, list]]) -> dict[str, Any]:
        width = max(len(b["input_ids"]) for b in blocks)
        padded = [
            {**b, "offset_mapping": b["offset_mapping"] + [(0, 0)] * (width - len(b["input_ids"]))}
            for b in blocks
        ]
        return self.collator(padded)
