"""Layer combiners on a real (tiny, random) BERT hidden-state tuple."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, BertConfig, BertModel

from ner.model.checkpoint import build_module, module_spec
from ner.modules.combiners import (
    ConcatLayers,
    LastLayer,
    MeanLayers,
    ScalarMix,
    SingleLayer,
    SumLayers,
    masked_layer_norm,
)
from ner.utils.errors import NERError

ROWS, PIECES = 3, 7


def run_encoder(model) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    torch.manual_seed(1)
    input_ids = torch.randint(5, model.config.vocab_size, (ROWS, PIECES))
    mask = torch.ones(ROWS, PIECES, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 3:] = 0
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=mask, output_hidden_states=True)
    return tuple(out.hidden_states), mask


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    """Hidden states of the 3-layer, hidden-16 fixture BERT: 4 states."""
    model = AutoModel.from_pretrained(tiny_model_dir)
    return run_encoder(model) + (model.config,)


@pytest.fixture(scope="module")
def deep():
    """A 4-layer BERT (5 states), so the last four layers exclude the embeddings."""
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    return run_encoder(BertModel(config).eval()) + (config,)


@pytest.mark.parametrize(
    "combiner, factor",
    [
        (LastLayer(), 1),
        (SingleLayer(-2), 1),
        (SingleLayer(0), 1),
        (SumLayers(), 1),
        (MeanLayers([1, 2]), 1),
        (ConcatLayers(), 4),
        (ConcatLayers([0, -1]), 2),
        (ScalarMix(), 1),
        (ScalarMix([-2, -1], layer_norm=True, dropout=0.5), 1),
    ],
    ids=lambda x: type(x).__name__ if not isinstance(x, int) else str(x),
)
def test_output_shape_and_dim(tiny, combiner, factor):
    states, mask, config = tiny
    assert len(states) == config.num_hidden_layers + 1 == 4
    dim = combiner.bind(config.num_hidden_layers, config.hidden_size)
    assert dim == factor * config.hidden_size
    out = combiner(states, mask)
    assert out.shape == (ROWS, PIECES, dim)


def test_layer_indices_and_what_they_select(deep):
    states, mask, config = deep
    n = config.num_hidden_layers
    assert LastLayer().layer_indices(n) == [4]
    assert not LastLayer.needs_all_hidden_states and SumLayers.needs_all_hidden_states
    assert SingleLayer(-2).layer_indices(n) == [3]
    assert SumLayers().layer_indices(n) == [1, 2, 3, 4]
    assert ScalarMix().layer_indices(n) == [0, 1, 2, 3, 4]
    assert ScalarMix([-5, 0, 2]).layer_indices(n) == [0, 0, 2]
    single = SingleLayer(-2)
    single.bind(n, 16)
    assert torch.equal(single(states, mask), states[3])
    last = LastLayer()
    last.bind(n, 16)
    assert torch.equal(last((states[-1],), mask), states[4])  # the tagger passes (last,) only


def test_concat_of_last_four_is_four_times_hidden(deep):
    states, mask, config = deep
    concat = ConcatLayers([-4, -3, -2, -1])
    assert concat.bind(config.num_hidden_layers, config.hidden_size) == 4 * 16
    out = concat(states, mask)
    assert out.shape == (ROWS, PIECES, 64)
    for k in range(4):
        assert torch.equal(out[..., 16 * k : 16 * (k + 1)], states[k + 1])


def test_sum_is_four_times_mean_and_equal_scalar_mix_is_mean(deep):
    states, mask, config = deep
    n, h = config.num_hidden_layers, config.hidden_size
    total, mean, mix = SumLayers(), MeanLayers(), ScalarMix([-4, -3, -2, -1])
    for combiner in (total, mean, mix):
        combiner.bind(n, h)
    torch.testing.assert_close(total(states, mask), 4 * mean(states, mask))
    torch.testing.assert_close(mix(states, mask), mean(states, mask))
    torch.testing.assert_close(mix.weights(), torch.full((4,), 0.25))
    all_mix, all_mean = ScalarMix(), MeanLayers(list(range(n + 1)))
    all_mix.bind(n, h)
    all_mean.bind(n, h)
    torch.testing.assert_close(all_mix(states, mask), all_mean(states, mask))


def test_scalar_mix_learns_weights_and_gamma(deep):
    states, mask, config = deep
    mix = ScalarMix([-1, 0])
    mix.bind(config.num_hidden_layers, config.hidden_size)
    with torch.no_grad():
        mix.scalar_parameters.copy_(torch.tensor([0.0, 1.0]))
        mix.gamma.fill_(2.0)
    w = torch.softmax(torch.tensor([0.0, 1.0]), 0)
    torch.testing.assert_close(mix(states, mask), 2 * (w[0] * states[4] + w[1] * states[0]))
    assert not mix.weights().requires_grad
    loss = mix(states, mask).sum()
    loss.backward()
    assert mix.scalar_parameters.grad is not None and mix.gamma.grad is not None


def test_scalar_mix_dropout_only_in_training(deep):
    states, mask, config = deep
    mix = ScalarMix(dropout=0.5)
    mix.bind(config.num_hidden_layers, config.hidden_size)
    mean = MeanLayers(list(range(5)))
    mean.bind(config.num_hidden_layers, config.hidden_size)
    mix.eval()
    torch.testing.assert_close(mix(states, mask), mean(states, mask))
    mix.train()
    torch.manual_seed(3)
    outs = [mix(states, mask) for _ in range(5)]
    assert any(not torch.allclose(o, mean(states, mask)) for o in outs)
    for out in outs:
        assert torch.isfinite(out).all()


def test_bad_layer_index_is_a_clear_error():
    message = (
        "combiner layers: layer -9 does not exist; the encoder has 7 hidden states "
        "(embeddings 0 and layers 1..6; use -7..6)"
    )
    with pytest.raises(NERError) as info:
        SumLayers([-1, -9]).bind(6, 16)
    assert str(info.value) == message
    for bad in (ConcatLayers([7]), ScalarMix([-8])):
        with pytest.raises(NERError, match="does not exist; the encoder has 7 hidden states"):
            bad.bind(6, 16)
    with pytest.raises(NERError, match="^combiner layer: layer 4 does not exist"):
        SingleLayer(4).bind(3, 16)
    with pytest.raises(NERError, match="at least one layer"):
        MeanLayers([]).bind(3, 16)
    SingleLayer(-7).bind(6, 16)  # the embeddings, counted from the end
    SingleLayer(6).bind(6, 16)


def test_masked_layer_norm_ignores_padded_pieces(tiny):
    states, mask, config = tiny
    mix = ScalarMix(layer_norm=True)
    mix.bind(config.num_hidden_layers, config.hidden_size)
    before = mix(states, mask)
    noisy = tuple(
        torch.where(mask.bool().unsqueeze(-1), h, 1e3 * torch.randn_like(h)) for h in states
    )
    after = mix(noisy, mask)
    keep = mask.bool()
    torch.testing.assert_close(after[keep], before[keep], rtol=0, atol=0)
    # Without masking the padding would shift the statistics.
    unmasked = torch.ones_like(mask)
    assert not torch.allclose(mix(noisy, unmasked)[keep], before[keep])
    # Statistics are over the unmasked pieces: those come out with mean 0 and variance 1.
    normed = masked_layer_norm(states[1], mask)[keep]
    torch.testing.assert_close(normed.mean(), torch.tensor(0.0), atol=1e-5, rtol=0)
    torch.testing.assert_close(normed.pow(2).mean(), torch.tensor(1.0), atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    "combiner",
    [
        LastLayer(),
        SingleLayer(-3),
        SumLayers([-2, -1]),
        ConcatLayers(),
        ScalarMix([0, 1], True, 0.1),
    ],
    ids=lambda c: type(c).__name__,
)
def test_checkpoint_spec_round_trip(combiner):
    spec = module_spec(combiner)
    rebuilt = build_module(spec, "combiner")
    assert type(rebuilt) is type(combiner) and module_spec(rebuilt) == spec
    assert rebuilt.bind(4, 8) == combiner.bind(4, 8)
    if isinstance(combiner, ScalarMix):
        assert spec["init_args"] == {"layers": [0, 1], "layer_norm": True, "dropout": 0.1}
        assert set(dict(rebuilt.named_parameters())) == {"scalar_parameters", "gamma"}


def test_forward_before_bind_is_a_clear_bug(tiny):
    states, mask, _ = tiny
    with pytest.raises(RuntimeError, match="bind"):
        SumLayers()(states, mask)


def test_scalar_mix_gradients_match_the_weighted_sum_and_stay_fp32_under_autocast(deep):
    states, mask, config = deep
    states = [h.clone().requires_grad_(True) for h in states]
    mix = ScalarMix()
    mix.bind(config.num_hidden_layers, config.hidden_size)
    with torch.no_grad():
        mix.scalar_parameters.copy_(torch.linspace(-1.0, 1.0, len(states)))
    target = torch.randn_like(states[0])
    (mix(states, mask) * target).sum().backward()
    logits = mix.scalar_parameters.detach().clone().requires_grad_(True)
    reference = [h.detach().clone().requires_grad_(True) for h in states]
    weights = torch.softmax(logits, 0)
    (sum(w * h for w, h in zip(weights, reference, strict=True)) * target).sum().backward()
    torch.testing.assert_close(mix.scalar_parameters.grad, logits.grad)
    for h, ref in zip(states, reference, strict=True):
        torch.testing.assert_close(h.grad, ref.grad)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert mix(states, mask).dtype == torch.float32


@pytest.mark.parametrize(
    "combiner, stored_layers",
    [
        (LastLayer(), [4]),
        (SingleLayer(-2), [1, 3]),
        (SumLayers(), [1, 2, 3, 4]),
        (ConcatLayers([0, -1]), [0, 4]),
        (ScalarMix(), [0, 1, 2, 3, 4]),  # the fast path: the block as it is
        (ScalarMix(dropout=0.4), [0, 1, 2, 3, 4]),
        (ScalarMix([-1, 0]), [0, 4]),  # other order: through forward
        (ScalarMix(layer_norm=True), [0, 1, 2, 3, 4]),
    ],
    ids=["last", "single", "sum", "concat", "mix", "mix-dropout", "mix-order", "mix-norm"],
)
def test_combining_stored_states_is_forward_on_the_converted_tuple(deep, combiner, stored_layers):
    states, mask, config = deep
    combiner.bind(config.num_hidden_layers, config.hidden_size)
    combiner.train()  # weight dropout draws: both sides must draw alike
    stored = torch.stack([states[i] for i in stored_layers]).half()  # [K, R, P, H]
    tuple_ = [s.half().float() for s in states]  # what the feature cache gives back
    learns = any(True for _ in combiner.parameters())
    torch.manual_seed(3)
    expected = combiner(tuple_, mask)
    if learns:
        expected.sum().backward()
    grads = [p.grad.clone() for p in combiner.parameters()]
    combiner.zero_grad()
    torch.manual_seed(3)
    got = combiner.combine_stored(stored, stored_layers, mask)
    if learns:
        got.sum().backward()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    for grad, p in zip(grads, combiner.parameters(), strict=True):
        torch.testing.assert_close(p.grad, grad, rtol=1e-5, atol=1e-5)
