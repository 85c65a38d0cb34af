"""Words -> word pieces -> encoder windows: THE alignment routine (training, eval, prediction).

A sentence is never truncated: one longer than a window is split into overlapping windows that
start and end on word boundaries, and each word is owned by exactly one of them. The only cut is
inside a single word with more pieces than a window holds: it keeps its first `budget` pieces.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from ner.data.windows import WindowSettings
from ner.utils.errors import NERError


@dataclass
class Aligned:
    """One sentence as encoder rows: `input_ids` and `piece_word` are `[windows][pieces]`."""

    input_ids: list[list[int]]  # each window with its special tokens
    piece_word: list[list[int]]  # word index in the sentence if this window owns it, else -1
    num_pieces: int  # real pieces of the sentence (after the per-word cut), for bucketing


def tokenize_words(tokenizer, sentences: list[list[str]]) -> tuple[list[list[list[int]]], int]:
    """Piece ids `[sentences][words][pieces]` (no specials); zero-piece words get `[unk]`.

    Returns also the number of zero-piece words (BERT maps e.g. U+200B, U+00AD to nothing).
    """
    pieces, zero = tokenize_words_counted(tokenizer, sentences)
    return pieces, sum(zero)


def tokenize_words_counted(
    tokenizer, sentences: list[list[str]]
) -> tuple[list[list[list[int]]], list[int]]:
    """`tokenize_words` with the zero-piece words counted per sentence."""
    if not sentences:
        return [], []
    enc = tokenizer(sentences, is_split_into_words=True, add_special_tokens=False)
    out, zero = [], []
    for i, words in enumerate(sentences):
        pieces: list[list[int]] = [[] for _ in words]
        for piece, word in zip(enc["input_ids"][i], enc.word_ids(i), strict=True):
            if word is not None:
                pieces[word].append(piece)
        empty = [word_pieces for word_pieces in pieces if not word_pieces]
        for word_pieces in empty:
            word_pieces.append(tokenizer.unk_token_id)
        out.append(pieces)
        zero.append(len(empty))
    return out, zero


def special_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """(prefix, suffix) special-token ids the tokenizer puts around one sequence."""
    enc = tokenizer([["a"]], is_split_into_words=True, add_special_tokens=True)
    ids, word_ids = enc["input_ids"][0], enc.word_ids(0)
    inside = [i for i, w in enumerate(word_ids) if w is not None]
    return ids[: inside[0]], ids[inside[-1] + 1 :]


def _context(flat: list[list[int]], s: int, n: int, left: bool) -> list[int]:
    """Up to `n` pieces of the sentences before (`left`) or after sentence `s` of `flat`."""
    if n <= 0:
        return []
    pieces: list[int] = []
    others = range(s - 1, -1, -1) if left else range(s + 1, len(flat))
    for t in others:
        if len(pieces) >= n:
            break
        pieces = flat[t] + pieces if left else pieces + flat[t]
    return pieces[max(0, len(pieces) - n) :] if left else pieces[:n]


def _spans(bounds: list[int], budget: int, stride: int) -> list[tuple[int, int]]:
    """Windows as word spans `[a, b)` over a sentence whose words start at piece offsets
    `bounds` (then its end): each as long as the budget allows, starts ~`stride` apart."""
    spans, a, words = [], 0, len(bounds) - 1
    while True:
        b = bisect_right(bounds, bounds[a] + budget) - 1
        spans.append((a, b))
        if b == words:
            return spans
        a = min(b, max(a + 1, bisect_right(bounds, bounds[a] + stride) - 1))


def _owners(bounds: list[int], spans: list[tuple[int, int]]) -> list[int]:
    """Per word, the window where it has the most context on its poorer side."""
    owner, best = [0] * (len(bounds) - 1), [-1] * (len(bounds) - 1)
    for r, (a, b) in enumerate(spans):
        for w in range(a, b):
            room = min(bounds[w] - bounds[a], bounds[b] - bounds[w + 1])
            if room > best[w]:
                owner[w], best[w] = r, room
    return owner


def build_windows(
    doc_word_pieces: list[list[list[int]]],
    prefix: list[int],
    suffix: list[int],
    max_length: int,
    stride: int | None = None,
    context_pieces: int = 0,
) -> list[Aligned]:
    """One `Aligned` per sentence of ONE document (`[sentences][words][pieces]`).

    `stride`: pieces between consecutive window starts of a long sentence (None: half the
    budget); `context_pieces`: pieces of the neighbouring sentences of this document added on
    each side (FLERT), visible to the encoder but owned by no word.
    """
    budget = max_length - len(prefix) - len(suffix)
    if budget < 1:
        raise NERError(f"max_length {max_length} leaves no room beside the special tokens")
    stride = max(1, budget // 2 if stride is None else stride)
    doc = [[word[:budget] for word in sent] for sent in doc_word_pieces]
    flat = [[p for word in sent for p in word] for sent in doc]  # [sentences][pieces]
    out = []
    for s, sent in enumerate(doc):
        if not sent:
            specials = prefix + suffix
            out.append(Aligned([specials], [[-1] * len(specials)], 0))
            continue
        bounds = [0]  # piece offset of each word start, then the end
        for word in sent:
            bounds.append(bounds[-1] + len(word))
        spans = _spans(bounds, budget, stride)
        owner = _owners(bounds, spans)
        aligned = Aligned([], [], bounds[-1])
        for r, (a, b) in enumerate(spans):
            core = flat[s][bounds[a] : bounds[b]]
            tags = [w if owner[w] == r else -1 for w in range(a, b) for _ in sent[w]]
            free = budget - len(core)
            left_want = len(_context(flat, s, context_pieces, True)) if a == 0 else 0
            right_want = len(_context(flat, s, context_pieces, False)) if b == len(sent) else 0
            # share a short budget evenly; what one side cannot use goes to the other
            n_left = min(left_want, free - min(right_want, free // 2))
            n_right = min(right_want, free - n_left)
            left = _context(flat, s, n_left, True)
            right = _context(flat, s, n_right, False)
            aligned.input_ids.append(prefix + left + core + right + suffix)
            aligned.piece_word.append(
                [-1] * (len(prefix) + len(left)) + tags + [-1] * (len(right) + len(suffix))
            )
        out.append(aligned)
    return out


def align_rows(
    tokenizer, tokens: list[list[str]], doc_ids: list[int], settings: WindowSettings
) -> dict[str, list]:
    """Windows for sentences in document order (`doc_ids`: consecutive equal ids form a document,
    whose sentences are each other's context): per sentence `input_ids` and `piece_word`
    (`[windows][pieces]`), `num_pieces` and `zero_piece_words`. The one routine that turns words
    into encoder rows, for training, evaluation and inference alike."""
    prefix, suffix = special_tokens(tokenizer)
    pieces, zero = tokenize_words_counted(tokenizer, tokens)
    out: dict[str, list] = {
        "input_ids": [],
        "piece_word": [],
        "num_pieces": [],
        "zero_piece_words": zero,
    }
    start = 0
    while start < len(doc_ids):
        end = start
        while end < len(doc_ids) and doc_ids[end] == doc_ids[start]:
            end += 1
        for aligned in build_windows(
            pieces[start:end],
            prefix,
            suffix,
            settings.max_length,
            settings.stride,
            settings.context_pieces,
        ):
            out["input_ids"].append(aligned.input_ids)
            out["piece_word"].append(aligned.piece_word)
            out["num_pieces"].append(aligned.num_pieces)
        start = end
    return out
