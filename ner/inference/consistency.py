"""Document-level label consistency at decoding time: a name repeated in a document is tagged alike.

A capitalised word form that recurs in a document mostly names the same entity each time, but
the encoder sees each occurrence with at most its neighbouring sentences as context, so a name
introduced clearly ("Bill Clinton said") can be tagged differently where it stands alone in a
headline or a table. Each occurrence of such a word gets a prior added to its emissions before
the constrained decode:

    prior[t, label] = weight * log q(type(label))

where `q` is the mean entity-type distribution (the decoder's per-word tag probabilities, B- and
I- summed per type, `O` its own type) of the word's *other* occurrences in the document. A word
seen once, or written without a capital, is left alone (lower-case words inside names, such as
"of" in "Bank of England", would otherwise be pulled to `O` by their many ordinary uses), and so
is an occurrence the model is already sure of (its top type at probability `SURE` or more): the
same string can rightly take two types in one document, as a city does in a sports report's
dateline (LOC) and in its results table (the team, ORG), and without this gate such sure
readings were overturned more often than unsure ones were fixed (docs/results.md). Weight 0 is
plain decoding.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

# The least type probability a prior reads: one confident neighbour cannot veto a type outright.
FLOOR = 1e-4
# An occurrence whose own top type probability reaches this keeps its reading (no prior).
SURE = 0.7
# Sentences decoded at a time once a document's priors are known.
DECODE_ROWS = 512


def label_types(labels: Sequence[str]) -> tuple[Tensor, int]:
    """Each IOB2 label's type index `[C]` (`O` is type 0) and the number of types."""
    types = ["O", *dict.fromkeys(label[2:] for label in labels if label != "O")]
    index = [0 if label == "O" else types.index(label[2:]) for label in labels]
    return torch.tensor(index), len(types)


def is_keyed(word: str) -> bool:
    """Whether a word form takes part: it starts with an upper-case letter."""
    return word[:1].isupper()


def document_priors(
    words: Sequence[Sequence[str]],
    probs: Sequence[Tensor],
    labels: Sequence[str],
    weight: float,
    sure: float = SURE,
) -> list[Tensor]:
    """Additive emission priors `[n, C]` for each sentence of one document.

    Args:
        words: the document's sentences, as words.
        probs: each sentence's per-word tag probabilities `[n, C]` (`head.probabilities`).
        labels: the IOB2 labels, in the order of the last dimension.
        weight: how much the other occurrences count against the word's own emissions.
        sure: an occurrence whose own top type probability reaches this gets no prior.
    """
    label_type, n_types = label_types(labels)
    to_types = torch.nn.functional.one_hot(label_type, n_types).to(torch.float32)  # [C, T]
    type_probs = [p.float() @ to_types for p in probs]  # each [n, T]
    sums: dict[str, Tensor] = {}
    counts: Counter[str] = Counter()
    for sentence, tp in zip(words, type_probs, strict=True):
        for word, row in zip(sentence, tp, strict=True):
            if is_keyed(word):
                sums[word] = sums[word] + row if word in sums else row.clone()
                counts[word] += 1
    priors = []
    for sentence, tp in zip(words, type_probs, strict=True):
        prior = torch.zeros(len(sentence), len(labels))  # [n, C]
        for i, word in enumerate(sentence):
            if counts[word] > 1 and tp[i].max() < sure:
                others = (sums[word] - tp[i]) / (counts[word] - 1)  # [T]
                prior[i] = weight * others.clamp_min(FLOOR).log()[label_type]
        priors.append(prior)
    return priors


def pad(rows: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """Sentences' `[n_i, C]` rows as one batch `[B, W, C]` and its word mask `[B, W]`."""
    batch = pad_sequence(list(rows), batch_first=True)  # [B, W, C]
    lengths = torch.tensor([len(r) for r in rows])  # [B]
    mask = torch.arange(batch.shape[1]) < lengths[:, None]  # [B, W]
    return batch, mask


def sentence_outputs(model: Any, batch: dict[str, Tensor]) -> list[tuple[Tensor, Tensor]]:
    """Each sentence's emissions and tag probabilities `[n, C]` in a batch, on the CPU."""
    return split_outputs(model, model(batch), batch["word_mask"])


def split_outputs(model: Any, emissions: Tensor, word_mask: Tensor) -> list[tuple[Tensor, Tensor]]:
    """`sentence_outputs` of a batch's emissions `[B, W, C]` already computed."""
    emissions = emissions.detach().float()  # [B, W, C]
    probs = model.head.probabilities(emissions, word_mask)  # [B, W, C]
    lengths = word_mask.sum(1).tolist()
    return [(e[:n].cpu(), p[:n].cpu()) for e, p, n in zip(emissions, probs, lengths, strict=True)]


def decode_document(
    model: Any,
    words: Sequence[Sequence[str]],
    outputs: Sequence[tuple[Tensor, Tensor]],
    weight: float,
    sure: float = SURE,
) -> Iterator[tuple[list[str], list[float]]]:
    """(IOB2 tags, per-word scores) of each sentence of one document, decoded by `model.head`
    from its `sentence_outputs` with the consistency priors of `weight` (and `sure`) added."""
    probs = [p for _, p in outputs]
    priors = document_priors(words, probs, model.labels, weight, sure)
    adjusted = [e + prior for (e, _), prior in zip(outputs, priors, strict=True)]
    device = next(model.parameters()).device
    for start in range(0, len(adjusted), DECODE_ROWS):
        emissions, mask = pad(adjusted[start : start + DECODE_ROWS])  # [B, W, C], [B, W]
        tags, scores = model.head.decode(emissions.to(device), mask.to(device))  # [B, W]
        lengths = mask.sum(1).tolist()
        for row, score, n in zip(tags.tolist(), scores.tolist(), lengths, strict=True):
            yield [model.labels[x] for x in row[:n]], score[:n]


def decode_documents(
    model: Any,
    words: Iterable[Sequence[str]],
    outputs: Iterable[tuple[Tensor, Tensor]],
    doc_ids: Iterable[int],
    weight: float,
    sure: float = SURE,
) -> Iterator[tuple[list[str], list[float]]]:
    """`decode_document` over a stream of sentences (their words, `sentence_outputs` and
    document ids, in document order): each document is decoded once all of it has arrived."""
    rows = zip(doc_ids, words, outputs, strict=True)
    for _, doc in itertools.groupby(rows, key=lambda row: row[0]):
        _, doc_words, doc_outputs = zip(*doc, strict=True)
        yield from decode_document(model, doc_words, doc_outputs, weight, sure)
