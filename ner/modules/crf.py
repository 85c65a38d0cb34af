"""Linear-chain CRF and the (constrained) Viterbi decoder, vectorised over the batch.

Masks may have holes: a masked word is skipped, and the transition applies between consecutive
unmasked words. A sentence with no unmasked word scores 0 and decodes to all tag 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

DISALLOWED = -10000.0  # the cost of a forbidden transition, as in AllenNLP's constrained CRF


def viterbi_decode(
    emissions: Tensor, mask: Tensor, transitions: Tensor, start: Tensor, end: Tensor
) -> tuple[Tensor, Tensor]:
    """Best tag sequence `[B, W]` (0 where masked) and its score `[B]`.

    `emissions [B, W, C]`, `mask [B, W]`, `transitions [C, C]` (from i to j), `start`, `end [C]`.
    """
    batch, length, num_tags = emissions.shape
    mask = mask.bool()
    score = emissions.new_zeros(batch, num_tags)
    started = torch.zeros(batch, dtype=torch.bool, device=emissions.device)
    stay = torch.arange(num_tags, device=emissions.device).expand(batch, num_tags)
    backpointers = []  # [B, C] per word: the best previous tag for each tag
    for t in range(length):
        best, previous = (score.unsqueeze(2) + transitions).max(dim=1)  # over the previous tag
        new = torch.where(started.unsqueeze(1), best, start) + emissions[:, t]
        on = mask[:, t].unsqueeze(1)
        score = torch.where(on, new, score)
        # A skipped word points each tag to itself, so backtracking passes through unchanged.
        backpointers.append(torch.where(on & started.unsqueeze(1), previous, stay))
        started = started | mask[:, t]
    path_score, last = (score + end).max(dim=1)
    tags = [last]
    for pointers in reversed(backpointers[1:]):
        tags.append(pointers.gather(1, tags[-1].unsqueeze(1)).squeeze(1))
    tags = torch.stack(tags[::-1], dim=1) if length else last.new_zeros(batch, 0)
    return tags.masked_fill(~mask, 0), torch.where(started, path_score, 0.0)


class ConditionalRandomField(nn.Module):
    """Linear-chain CRF with learned transitions; decoding honours `constraints` (AllenNLP-style).

    `constraints = (start_allowed [C], trans_allowed [C][C])` (e.g. `schemes.allowed_transitions`)
    apply where a forbidden move costs `DISALLOWED`: in `decode` and `marginals`, not in the
    likelihood (as in AllenNLP), so a gold sequence that breaks them never blows up the loss.
    """

    def __init__(
        self,
        num_tags: int,
        constraints: tuple[Sequence[bool], Sequence[Sequence[bool]]] | None = None,
    ):
        super().__init__()
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))
        self.start_transitions = nn.Parameter(torch.zeros(num_tags))
        self.end_transitions = nn.Parameter(torch.zeros(num_tags))
        start_ok, trans_ok = constraints if constraints is not None else (None, None)
        start_ok = torch.ones(num_tags, dtype=torch.bool) if start_ok is None else start_ok
        trans_ok = (
            torch.ones(num_tags, num_tags, dtype=torch.bool) if trans_ok is None else trans_ok
        )
        self.register_buffer("start_allowed", torch.as_tensor(start_ok, dtype=torch.bool), False)
        self.register_buffer("trans_allowed", torch.as_tensor(trans_ok, dtype=torch.bool), False)

    def constrained(self) -> tuple[Tensor, Tensor, Tensor]:
        """(transitions, start, end) with forbidden moves set to `DISALLOWED`."""
        return (
            self.transitions.masked_fill(~self.trans_allowed, DISALLOWED),
            self.start_transitions.masked_fill(~self.start_allowed, DISALLOWED),
            self.end_transitions,
        )

    def log_likelihood(self, emissions: Tensor, tags: Tensor, mask: Tensor) -> Tensor:
        """`log p(tags | emissions)` per sentence `[B]` (unconstrained transitions)."""
        params = (self.transitions, self.start_transitions, self.end_transitions)
        _, log_z = forward_algorithm(emissions, mask, *params)
        return sequence_score(emissions, tags, mask, *params) - log_z

    def decode(self, emissions: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Constrained Viterbi: tags `[B, W]` and path scores `[B]`."""
        return viterbi_decode(emissions, mask, *self.constrained())

    def marginals(self, emissions: Tensor, mask: Tensor) -> Tensor:
        """`p(tag_t = j | emissions)` `[B, W, C]` under the constrained model (0 where masked)."""
        log_p = self.log_marginals(emissions, mask)
        return torch.where(mask.bool().unsqueeze(-1), log_p.exp().clamp(max=1.0), 0.0)

    def log_marginals(self, emissions: Tensor, mask: Tensor) -> Tensor:
        """`log p(tag_t = j | emissions)` `[B, W, C]` (forbidden tags -inf; masked rows 0),
        differentiable: what a distilled student's loss reads."""
        transitions, start, end = self.constrained()
        alphas, log_z = forward_algorithm(emissions, mask, transitions, start, end)
        betas = backward_algorithm(emissions, mask, transitions, end)
        log_p = alphas + betas - log_z[:, None, None]  # [B, W, C]
        return torch.where(mask.bool().unsqueeze(-1), log_p.clamp(max=0.0), 0.0)


def forward_algorithm(
    emissions: Tensor, mask: Tensor, transitions: Tensor, start: Tensor, end: Tensor
) -> tuple[Tensor, Tensor]:
    """Forward log-scores `alpha [B, W, C]` (of words up to and including t) and `log Z [B]`."""
    batch, length, num_tags = emissions.shape
    mask = mask.bool()
    alpha = emissions.new_zeros(batch, num_tags)
    started = torch.zeros(batch, dtype=torch.bool, device=emissions.device)
    alphas = []
    for t in range(length):
        moved = torch.logsumexp(alpha.unsqueeze(2) + transitions, dim=1)
        new = torch.where(started.unsqueeze(1), moved, start) + emissions[:, t]
        alpha = torch.where(mask[:, t].unsqueeze(1), new, alpha)
        alphas.append(alpha)
        started = started | mask[:, t]
    log_z = torch.where(started, torch.logsumexp(alpha + end, dim=1), 0.0)
    stacked = torch.stack(alphas, dim=1) if length else emissions.new_zeros(batch, 0, num_tags)
    return stacked, log_z


def backward_algorithm(emissions: Tensor, mask: Tensor, transitions: Tensor, end: Tensor) -> Tensor:
    """Backward log-scores `beta [B, W, C]`: of the words after t, given tag j at t."""
    batch, length, num_tags = emissions.shape
    mask = mask.bool()
    after = emissions.new_zeros(batch, num_tags)  # emission + beta of the next unmasked word
    seen = torch.zeros(batch, dtype=torch.bool, device=emissions.device)
    betas = []
    for t in reversed(range(length)):
        moved = torch.logsumexp(transitions + after.unsqueeze(1), dim=2)
        beta = torch.where(seen.unsqueeze(1), moved, end.expand(batch, num_tags))
        betas.append(beta)
        after = torch.where(mask[:, t].unsqueeze(1), emissions[:, t] + beta, after)
        seen = seen | mask[:, t]
    if not length:
        return emissions.new_zeros(batch, 0, num_tags)
    return torch.stack(betas[::-1], dim=1)


def sequence_score(
    emissions: Tensor, tags: Tensor, mask: Tensor, transitions: Tensor, start: Tensor, end: Tensor
) -> Tensor:
    """Unnormalised score `[B]` of the tag sequences `tags [B, W]` over the unmasked words."""
    batch, length, _ = emissions.shape
    mask = mask.bool()
    score = emissions.new_zeros(batch)
    previous = torch.zeros(batch, dtype=torch.long, device=emissions.device)
    started = torch.zeros(batch, dtype=torch.bool, device=emissions.device)
    for t in range(length):
        tag = tags[:, t]
        step = emissions[:, t].gather(1, tag.unsqueeze(1)).squeeze(1)
        step = step + torch.where(started, transitions[previous, tag], start[tag])
        score = score + torch.where(mask[:, t], step, 0.0)
        previous = torch.where(mask[:, t], tag, previous)
        started = started | mask[:, t]
    return score + torch.where(started, end[previous], 0.0)
