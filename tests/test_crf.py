"""CRF likelihood, marginals and Viterbi against brute force; constrained decoding is valid IOB2."""

from __future__ import annotations

import itertools
import math

import torch

from ner.corpus.schemes import allowed_transitions, is_valid_iob2
from ner.modules.crf import ConditionalRandomField, viterbi_decode

LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def random_problem(seed: int, batch=4, length=5, num_tags=3, holes=False):
    gen = torch.Generator().manual_seed(seed)
    emissions = torch.randn(batch, length, num_tags, generator=gen, dtype=torch.double)
    lengths = torch.tensor([length, 3, 1, 0][:batch])
    mask = torch.arange(length) < lengths.unsqueeze(1)
    if holes:  # unlabelled words inside a sentence are skipped
        mask[0, 1] = mask[1, 1] = False
    params = [
        torch.randn(*s, generator=gen, dtype=torch.double)
        for s in ((num_tags, num_tags), (num_tags,), (num_tags,))
    ]
    return emissions, mask, params


def path_score(emissions, positions, tags, transitions, start, end) -> float:
    if not positions:
        return 0.0
    score = start[tags[0]] + end[tags[-1]]
    score += sum(emissions[p, t] for p, t in zip(positions, tags, strict=True))
    score += sum(transitions[a, b] for a, b in itertools.pairwise(tags))
    return float(score)


def all_paths(emissions_b, mask_b, params):
    positions = [p for p in range(len(mask_b)) if mask_b[p]]
    num_tags = emissions_b.shape[-1]
    for tags in itertools.product(range(num_tags), repeat=len(positions)):
        yield positions, tags, path_score(emissions_b, positions, tags, *params)


def make_crf(params, constraints=None) -> ConditionalRandomField:
    crf = ConditionalRandomField(params[1].shape[0], constraints).double()
    with torch.no_grad():
        crf.transitions.copy_(params[0])
        crf.start_transitions.copy_(params[1])
        crf.end_transitions.copy_(params[2])
    return crf


def test_log_likelihood_and_marginals_match_brute_force():
    for seed, holes in [(0, False), (1, True), (2, False)]:
        emissions, mask, params = random_problem(seed, holes=holes)
        crf = make_crf(params)
        gen = torch.Generator().manual_seed(seed + 100)
        tags = torch.randint(0, 3, mask.shape, generator=gen)
        ll = crf.log_likelihood(emissions, tags, mask).detach()
        marginals = crf.marginals(emissions, mask)
        for b in range(len(mask)):
            paths = list(all_paths(emissions[b], mask[b], params))
            log_z = math.log(sum(math.exp(s) for _, _, s in paths))
            positions = paths[0][0]
            gold = path_score(
                emissions[b], positions, [int(tags[b, p]) for p in positions], *params
            )
            expected = gold - log_z if positions else 0.0
            assert math.isclose(float(ll[b]), expected, rel_tol=1e-9, abs_tol=1e-9)
            want = torch.zeros(mask.shape[1], 3, dtype=torch.double)
            for pos, path, s in paths:
                for p, t in zip(pos, path, strict=True):
                    want[p, t] += math.exp(s - log_z)
            torch.testing.assert_close(marginals[b], want)


def test_viterbi_matches_brute_force_argmax():
    for seed in range(6):
        emissions, mask, params = random_problem(seed, holes=seed % 2 == 1)
        tags, scores = viterbi_decode(emissions, mask, *params)
        for b in range(len(mask)):
            positions, best, best_score = max(
                all_paths(emissions[b], mask[b], params), key=lambda x: x[2]
            )
            assert [int(tags[b, p]) for p in positions] == list(best)
            assert math.isclose(float(scores[b]), best_score, rel_tol=1e-9, abs_tol=1e-9)
            assert all(int(tags[b, p]) == 0 for p in range(mask.shape[1]) if not mask[b, p])


def test_likelihood_is_differentiable_and_normalised():
    emissions, mask, params = random_problem(3, batch=2, length=3, num_tags=2)
    crf = make_crf(params)
    total = torch.zeros(2, dtype=torch.double)
    for seq in itertools.product(range(2), repeat=3):
        tags = torch.tensor([seq, seq])
        total += crf.log_likelihood(emissions, tags, torch.ones(2, 3, dtype=torch.bool)).exp()
    torch.testing.assert_close(total, torch.ones(2, dtype=torch.double))
    loss = -crf.log_likelihood(emissions, torch.zeros(2, 3, dtype=torch.long), mask).sum()
    loss.backward()
    assert crf.transitions.grad.abs().sum() > 0


def test_constrained_decoding_is_valid_and_equals_brute_force_over_valid_sequences():
    start_ok, trans_ok = allowed_transitions(LABELS)
    num_tags = len(LABELS)
    gen = torch.Generator().manual_seed(7)
    params = [
        torch.randn(*s, generator=gen, dtype=torch.double)
        for s in ((num_tags, num_tags), (num_tags,), (num_tags,))
    ]
    crf = make_crf(params, (start_ok, trans_ok))
    constrained = [c.detach() for c in crf.constrained()]
    # Many random emissions, strongly favouring I- tags so that invalid sequences would win.
    bias = torch.tensor([0.0, 0.0, 3.0, 0.0, 3.0], dtype=torch.double)
    emissions = 3 * torch.randn(300, 6, num_tags, generator=gen, dtype=torch.double) + bias
    lengths = torch.randint(0, 7, (300,), generator=gen)
    mask = torch.arange(6) < lengths.unsqueeze(1)
    with torch.no_grad():
        tags, scores = crf.decode(emissions, mask)
    for b in range(300):
        decoded = [LABELS[t] for t in tags[b, : int(lengths[b])].tolist()]
        assert is_valid_iob2(decoded), decoded
    # The same emissions decoded without constraints do produce invalid sequences.
    free, _ = viterbi_decode(emissions, mask, *params)
    lists = [[LABELS[t] for t in free[b, : int(lengths[b])].tolist()] for b in range(300)]
    assert sum(not is_valid_iob2(x) for x in lists) > 50
    valid = {
        n: [
            s
            for s in itertools.product(range(num_tags), repeat=n)
            if is_valid_iob2([LABELS[t] for t in s])
        ]
        for n in range(7)
    }
    for b in range(40):
        n = int(lengths[b])
        positions = list(range(n))
        best = max(valid[n], key=lambda s: path_score(emissions[b], positions, s, *params))
        assert tags[b, :n].tolist() == list(best)
        if n:
            expected = path_score(emissions[b], positions, best, *constrained)
            assert math.isclose(float(scores[b]), expected, rel_tol=1e-9)


def test_decode_with_minus_inf_constraints_is_valid():
    # The softmax head's setting: zero cost for allowed moves, -inf for forbidden ones.
    start_ok, trans_ok = allowed_transitions(LABELS)
    inf = float("-inf")
    transitions = torch.where(torch.tensor(trans_ok), 0.0, inf)
    start = torch.where(torch.tensor(start_ok), 0.0, inf)
    gen = torch.Generator().manual_seed(11)
    emissions = torch.randn(500, 8, len(LABELS), generator=gen).log_softmax(-1)
    mask = torch.arange(8) < torch.randint(1, 9, (500, 1), generator=gen)
    tags, scores = viterbi_decode(emissions, mask, transitions, start, torch.zeros(len(LABELS)))
    assert torch.isfinite(scores).all()
    for row, m in zip(tags.tolist(), mask.tolist(), strict=True):
        assert is_valid_iob2([LABELS[t] for t, on in zip(row, m, strict=True) if on])
