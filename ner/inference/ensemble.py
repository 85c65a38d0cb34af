"""Several taggers of one recipe tagging as one.
The members (e.g. the seeds of `ner seeds`) must share the tokenizer, the window settings and
the labels, so one alignment and one batch serve them all. Members with CRF heads combine as a
product of experts: one CRF whose emissions and transitions are the members' means (the
geometric mean of their path scores), decoded by its constrained Viterbi, so one member tags
exactly as itself. Averaging CRF marginals and decoding them instead lost 0.2 dev F1 on a single
CoNLL-2003 member (docs/results.md). Other heads average their softmax distributions, decoded
with the IOB2 constraints. It plugs into the one inference routine (`ner.inference.routine`) as
any tagger does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ner.data.dataset import tokenizer_fingerprint
from ner.inference.routine import predict_entities
from ner.modules.heads import LinearHead
from ner.utils.errors import NERError


def batch_mismatch(a: nn.Module, b: nn.Module) -> str | None:
    """What keeps one batch from serving taggers `a` and `b` (their `labels`, `window settings`
    or `tokenizer`), or None."""
    for what, get in (
        ("labels", lambda m: list(m.labels)),
        ("window settings", lambda m: m.window_settings),
        ("tokenizer", lambda m: tokenizer_fingerprint(m.tokenizer)),
    ):
        if get(a) != get(b):
            return what
    return None


class Ensemble(nn.Module):
    """`members` (taggers with the same tokenizer, windows and labels) as one tagger.

    Args:
        members: the taggers, e.g. `[load_tagger(p) for p in paths]`.
        names: how errors name each member (e.g. its checkpoint path).
    """

    def __init__(self, members: Sequence[nn.Module], names: Sequence[str] | None = None):
        super().__init__()
        if not members:
            raise NERError("an ensemble needs at least one member")
        names = list(names or [f"member {i}" for i in range(len(members))])
        first = members[0]
        for member, name in zip(members[1:], names[1:], strict=True):
            what = batch_mismatch(member, first)
            if what is not None:
                raise NERError(f"its {what} differ from {names[0]}'s", path=name)
        self.members = nn.ModuleList(members)
        self.tokenizer, self.labels = first.tokenizer, list(first.labels)
        self.window_settings = first.window_settings
        self.consistency = getattr(first, "consistency", 0.0)  # the first checkpoint's setting
        self.crf = all(m.head.crf_layer is not None for m in members)
        # decoding only: its CRF holds the members' mean transitions, its linear layer is unused
        self.head = LinearHead(dropout=0.0, crf=self.crf)
        self.head.bind(1, self.labels)
        if self.crf:
            with torch.no_grad():
                for name, param in self.head.crf_layer.named_parameters():
                    param.copy_(
                        torch.stack([m.head.crf_layer.get_parameter(name) for m in members]).mean(0)
                    )
        self.runtime = None

    @property
    def word_inputs(self) -> tuple[str, ...]:
        """Every per-word input any member's word features read."""
        return tuple(dict.fromkeys(name for m in self.members for name in m.word_inputs))

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """What `head.decode` reads `[B, W, C]`: the members' mean emissions (CRF members), or
        the log of their mean tag distribution."""
        return self.combine([m(batch).float() for m in self.members], batch["word_mask"])

    def combine(self, emissions: Sequence[Tensor], word_mask: Tensor) -> Tensor:
        """`forward` from the members' own emissions `[B, W, C]` of one batch, in member order
        (`ner score` scores the members and the ensemble from one pass of each member)."""
        if self.crf:
            return torch.stack(list(emissions)).mean(0)  # [B, W, C]
        pairs = zip(self.members, emissions, strict=True)
        probs = torch.stack([m.head.probabilities(e, word_mask) for m, e in pairs])  # [M, B, W, C]
        return probs.mean(0).clamp_min(torch.finfo(torch.float32).tiny).log()  # [B, W, C]

    def predict(self, texts: Sequence[str | Sequence[str]], **kwargs) -> list[list[dict]]:
        """Entities per input, as `NERTagger.predict`."""
        return predict_entities(self, texts, **kwargs)
