"""Tagging heads: word vectors -> emissions, loss, and IOB2-constrained decoding.

Every init argument is stored under its own name so a checkpoint can record and rebuild the head.
Loss is per labelled word (cross-entropy mean; CRF: negative log-likelihood summed over sentences,
divided by the number of labelled words), so both kinds have the same scale.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ner.corpus.schemes import allowed_transitions
from ner.modules.crf import ConditionalRandomField, viterbi_decode
from ner.utils.errors import NERError

IGNORE = -100


class TaggingHead(nn.Module):
    """Base head; subclasses build `self.features` (words -> `[B, W, F]`) and set `feature_dim`.

    `decode` scores are the per-word probability of the decoded tag: the softmax of the emissions
    for the softmax head, the CRF marginal (forward-backward, constrained) with `crf=True`.
    """

    def __init__(self, crf: bool = False):
        super().__init__()
        self.crf = crf
        self.labels: list[str] = []
        self.classifier: nn.Linear | None = None
        self.crf_layer: ConditionalRandomField | None = None

    def build(self, input_dim: int) -> int:
        """Create the layers before the classifier; return their output dim."""
        # reached when a config sets only `head.crf`: jsonargparse then builds the base class
        raise NERError(
            f"model.head: {type(self).__name__} is a base class; name a head, e.g. "
            "--model.head ner.modules.heads.LinearHead --model.head.crf true"
        )

    def features(self, words: Tensor, word_mask: Tensor) -> Tensor:
        raise NotImplementedError

    def bind(self, input_dim: int, labels: list[str]) -> None:
        """Size the layers for `input_dim` features and the IOB2 label set `labels`."""
        self.labels = list(labels)
        start, trans = allowed_transitions(self.labels)
        self.register_buffer("start_allowed", torch.tensor(start), persistent=False)
        self.register_buffer("trans_allowed", torch.tensor(trans), persistent=False)
        self.classifier = nn.Linear(self.build(input_dim), len(self.labels))
        if self.crf:
            self.crf_layer = ConditionalRandomField(len(self.labels), (start, trans))

    def forward(self, words: Tensor, word_mask: Tensor) -> Tensor:
        """`words [B, W, D]` -> emissions `[B, W, C]`."""
        return self.classifier(self.features(words, word_mask))

    def loss(self, emissions: Tensor, labels: Tensor, word_mask: Tensor) -> Tensor:
        """Mean loss per labelled word (`labels [B, W]`, -100 and `~word_mask` ignored)."""
        emissions = emissions.float()
        labelled = word_mask.bool() & (labels != IGNORE)
        count = labelled.sum().clamp(min=1)
        if self.crf_layer is not None:
            tags = labels.masked_fill(~labelled, 0)
            return -self.crf_layer.log_likelihood(emissions, tags, labelled).sum() / count
        targets = labels.masked_fill(~labelled, IGNORE)
        losses = F.cross_entropy(
            emissions.flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum"
        )
        return losses / count

    def probabilities(self, emissions: Tensor, word_mask: Tensor) -> Tensor:
        """Each word's distribution over tags `[B, W, C]`: the CRF marginals (constrained
        forward-backward, 0 on padding), or the softmax of the emissions."""
        emissions = emissions.float()
        if self.crf_layer is not None:
            return self.crf_layer.marginals(emissions, word_mask.bool())
        return emissions.softmax(-1)

    def log_probabilities(self, emissions: Tensor, word_mask: Tensor) -> Tensor:
        """The log of `probabilities` `[B, W, C]` (0 on padding), with its gradient."""
        emissions = emissions.float()
        if self.crf_layer is not None:
            return self.crf_layer.log_marginals(emissions, word_mask.bool())
        return emissions.log_softmax(-1).masked_fill(~word_mask.bool().unsqueeze(-1), 0.0)

    def decode(self, emissions: Tensor, word_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Valid IOB2 tags `[B, W]` (0 on padding) and the probability of each `[B, W]`."""
        emissions = emissions.float()
        mask = word_mask.bool()
        if self.crf_layer is not None:
            tags, _ = self.crf_layer.decode(emissions, mask)
            probs = self.probabilities(emissions, mask)
        else:
            # Constrained argmax: forbidden moves cost -inf, allowed ones nothing.
            log_probs = emissions.log_softmax(-1)
            forbidden = torch.tensor(float("-inf"), device=emissions.device)
            transitions = torch.where(self.trans_allowed, 0.0, forbidden)
            start = torch.where(self.start_allowed, 0.0, forbidden)
            tags, _ = viterbi_decode(log_probs, mask, transitions, start, torch.zeros_like(start))
            probs = log_probs.exp()
        scores = probs.gather(-1, tags.unsqueeze(-1)).squeeze(-1)
        return tags, torch.where(mask, scores, 0.0)


class LinearHead(TaggingHead):
    """Dropout and one linear layer (the BERT paper's fine-tuning head), optionally with a CRF."""

    def __init__(self, dropout: float = 0.1, crf: bool = False):
        super().__init__(crf=crf)
        self.dropout = dropout
        self.drop = nn.Dropout(dropout)

    def build(self, input_dim: int) -> int:
        return input_dim

    def features(self, words: Tensor, word_mask: Tensor) -> Tensor:
        return self.drop(words)


class BiLSTMHead(TaggingHead):
    """A BiLSTM over the words, then linear (the BERT paper's feature-based setup: 2 x 768)."""

    def __init__(
        self, hidden_size: int = 768, num_layers: int = 2, dropout: float = 0.1, crf: bool = False
    ):
        super().__init__(crf=crf)
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.dropout = dropout
        self.drop = nn.Dropout(dropout)
        self.lstm: nn.LSTM | None = None

    def build(self, input_dim: int) -> int:
        self.lstm = nn.LSTM(
            input_dim,
            self.hidden_size,
            num_layers=self.num_layers,
            dropout=self.dropout if self.num_layers > 1 else 0.0,
            bidirectional=True,
            batch_first=True,
        )
        return 2 * self.hidden_size

    def features(self, words: Tensor, word_mask: Tensor) -> Tensor:
        if words.shape[1] == 0:  # no sentence has a word: nothing to run (and packing refuses)
            return words.new_zeros(*word_mask.shape, 2 * self.hidden_size)
        # Packing keeps padding out of the backward direction; word_mask is a prefix per sentence.
        lengths = word_mask.sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(
            self.drop(words), lengths, batch_first=True, enforce_sorted=False
        )
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=words.shape[1])
        return self.drop(out)
