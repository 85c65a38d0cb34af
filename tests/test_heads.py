"""Tagging heads: shapes, loss masking, valid decoding, and that tiny heads overfit."""

from __future__ import annotations

import pytest
import torch

from ner.corpus.schemes import is_valid_iob2
from ner.model.checkpoint import build_module, module_spec
from ner.modules.heads import BiLSTMHead, LinearHead

LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
HEADS = [
    lambda: LinearHead(dropout=0.0),
    lambda: LinearHead(dropout=0.0, crf=True),
    lambda: BiLSTMHead(hidden_size=16, num_layers=2, dropout=0.0),
    lambda: BiLSTMHead(hidden_size=16, num_layers=1, dropout=0.0, crf=True),
]
IDS = ["linear", "linear-crf", "bilstm", "bilstm-crf"]


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny ops: on a busy 2-core machine intra-op threads cost 10x more than they bring.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def random_labels(
    gen: torch.Generator, batch: int, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Valid IOB2 label ids `[B, W]` (-100 on padding) and the word mask, variable lengths."""
    lengths = torch.randint(1, width + 1, (batch,), generator=gen)
    lengths[0] = width
    labels = torch.full((batch, width), -100)
    for b in range(batch):
        prev = 0
        for w in range(int(lengths[b])):
            choice = int(torch.randint(0, 5, (1,), generator=gen))
            if choice in (2, 4) and prev not in (choice - 1, choice):
                choice -= 1  # I-X only after B-X / I-X
            labels[b, w] = prev = choice
    return labels, labels != -100


def make_problem(seed: int, batch=8, width=7, dim=64):
    gen = torch.Generator().manual_seed(seed)
    labels, mask = random_labels(gen, batch, width)
    words = torch.randn(batch, width, dim, generator=gen)
    return words, labels, mask


@pytest.mark.parametrize("make_head", HEADS, ids=IDS)
def test_tiny_head_overfits_and_decodes_the_labels(make_head):
    torch.manual_seed(0)
    words, labels, mask = make_problem(0)
    head = make_head()
    head.bind(words.shape[-1], LABELS)
    optimizer = torch.optim.Adam(head.parameters(), lr=0.05)
    first = None
    for _ in range(150):
        loss = head.loss(head(words, mask), labels, mask)
        first = float(loss.detach()) if first is None else first
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    head.eval()
    with torch.no_grad():
        emissions = head(words, mask)
        final = float(head.loss(emissions, labels, mask))
        tags, scores = head.decode(emissions, mask)
    assert final < 0.05 < first
    assert torch.equal(tags[mask], labels[mask])
    assert torch.equal(tags[~mask], torch.zeros_like(tags[~mask]))
    assert (scores[mask] > 0.9).all() and (scores[mask] <= 1.0 + 1e-6).all()
    assert (scores[~mask] == 0).all()


@pytest.mark.parametrize("make_head", HEADS, ids=IDS)
def test_decoding_random_heads_is_always_valid_iob2(make_head):
    torch.manual_seed(1)
    head = make_head()
    head.bind(6, LABELS)
    head.eval()
    gen = torch.Generator().manual_seed(2)
    mask = torch.arange(9) < torch.randint(1, 10, (200, 1), generator=gen)
    # Emissions that favour I- tags: an unconstrained argmax would be invalid often.
    emissions = 2 * torch.randn(200, 9, len(LABELS), generator=gen)
    emissions[..., [2, 4]] += 2.0
    assert head(torch.randn(200, 9, 6), mask).shape == (200, 9, len(LABELS))
    tags, scores = head.decode(emissions, mask)
    invalid_argmax = 0
    for row, best, m in zip(
        tags.tolist(), emissions.argmax(-1).tolist(), mask.tolist(), strict=True
    ):
        assert is_valid_iob2([LABELS[t] for t, on in zip(row, m, strict=True) if on])
        invalid_argmax += not is_valid_iob2(
            [LABELS[t] for t, on in zip(best, m, strict=True) if on]
        )
    assert invalid_argmax > 50
    assert ((scores > 0) == mask).all() and (scores <= 1 + 1e-6).all()


def test_linear_scores_are_softmax_and_crf_scores_are_marginals():
    words, labels, mask = make_problem(3)
    for crf in (False, True):
        head = LinearHead(dropout=0.0, crf=crf)
        head.bind(words.shape[-1], LABELS)
        with torch.no_grad():
            emissions = head(words, mask)
            tags, scores = head.decode(emissions, mask)
            if crf:
                probs = head.crf_layer.marginals(emissions, mask)
                torch.testing.assert_close(probs.sum(-1)[mask], torch.ones(int(mask.sum())))
            else:
                probs = emissions.softmax(-1)
        want = probs.gather(-1, tags.unsqueeze(-1)).squeeze(-1) * mask
        torch.testing.assert_close(scores, want)


def test_loss_ignores_padding_and_unlabelled_words():
    words, labels, mask = make_problem(4)
    for crf in (False, True):
        head = LinearHead(dropout=0.0, crf=crf)
        head.bind(words.shape[-1], LABELS)
        emissions = head(words, mask)
        base = head.loss(emissions, labels, mask)
        noisy = emissions.detach().clone()
        noisy[~mask] = 100 * torch.randn_like(noisy[~mask])
        torch.testing.assert_close(head.loss(noisy, labels, mask), base.detach())
        assert float(head.loss(emissions, torch.full_like(labels, -100), mask).detach()) == 0.0


def test_bilstm_padding_does_not_leak_into_real_words():
    words, _, mask = make_problem(5)
    head = BiLSTMHead(hidden_size=8, num_layers=2, dropout=0.0)
    head.bind(words.shape[-1], LABELS)
    head.eval()
    noisy = words.clone()
    noisy[~mask] = 50 * torch.randn_like(noisy[~mask])
    with torch.no_grad():
        torch.testing.assert_close(head(noisy, mask)[mask], head(words, mask)[mask])


@pytest.mark.parametrize(
    "head, args",
    [
        (LinearHead(0.2, True), {"dropout": 0.2, "crf": True}),
        (
            BiLSTMHead(32, 1, 0.3),
            {"hidden_size": 32, "num_layers": 1, "dropout": 0.3, "crf": False},
        ),
    ],
    ids=["linear", "bilstm"],
)
def test_checkpoint_spec_round_trip(head, args):
    spec = module_spec(head)
    assert spec["init_args"] == args
    rebuilt = build_module(spec, "head")
    head.bind(10, LABELS)
    rebuilt.bind(10, LABELS)
    rebuilt.load_state_dict(head.state_dict(), strict=True)
