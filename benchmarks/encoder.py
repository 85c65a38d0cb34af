"""Achieved FLOP/s of our encoder forward (bf16 autocast) vs a bf16 matmul peak, same run.

ner bench encoder [--shapes 32x48,32x24,32x128] [--smoke] [--json PATH]
"""

from __future__ import annotations

import torch

from benchmarks.common import (
    best_time,
    build_tagger,
    describe,
    headline,
    native_bf16,
    parse,
    parser,
    report,
)


def encoder_flops(config, batch: int, seq: int) -> int:
    """Matmul FLOPs of one BERT forward: projections + FFN, attention scores and values."""
    hidden, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    tokens = batch * seq
    projections = 2 * tokens * (4 * hidden * hidden + 2 * hidden * inter)
    attention = 2 * 2 * batch * seq * seq * hidden  # heads x head_dim = hidden
    return layers * (projections + attention)


def matmul_rate(m: int, k: int, n: int, dtype: torch.dtype, repeats: int, warmup: int) -> float:
    """Best FLOP/s of a `[m, k] @ [k, n]` matmul in `dtype`."""
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    seconds = best_time(lambda: torch.matmul(a, b), repeats, warmup, budget=BUDGET)
    return 2 * m * k * n / seconds


BUDGET = 5.0  # seconds of timed runs per figure at most: emulated bf16 is ~100x slower
PRECISIONS = {"bf16 autocast": torch.bfloat16, "fp32": torch.float32}


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0], __file__)
    p.add_argument("--shapes", default="32x48,32x24,32x128", help="batch x pieces, comma-separated")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--peak-size", type=int, default=2048, help="square matmul side for the peak")
    args = parse(p, argv)
    if args.smoke:
        args.shapes, args.repeats, args.peak_size = "4x16", 1, 256
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    tagger = build_tagger(args.encoder, seed=args.seed).eval()
    config = tagger.encoder.config
    torch.manual_seed(args.seed)
    notes, rows = [], []
    for precision, dtype in PRECISIONS.items():
        slow = dtype == torch.bfloat16 and not native_bf16()
        # emulated bf16: one shape, a smaller peak matmul and one warm-up run keep it in minutes
        n = min(args.peak_size, 1024) if slow else args.peak_size
        warm = 1 if slow else 3
        peak = matmul_rate(n, n, n, dtype, args.repeats, warm)
        notes.append(f"{precision} peak: torch.matmul {n}^3 in {dtype}, best of <= {args.repeats}")
        for batch, seq in shapes[:1] if slow else shapes:
            # ids past the specials (speed does not depend on which)
            ids = torch.randint(min(1000, config.vocab_size // 2), config.vocab_size, (batch, seq))
            mask = torch.ones_like(ids)  # full rows: the analytic count is exact

            def forward(ids=ids, mask=mask, bf16=dtype == torch.bfloat16):
                with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=bf16):
                    tagger.encode(ids, mask)

            seconds = best_time(forward, args.repeats, warm, budget=BUDGET)
            flops = encoder_flops(config, batch, seq)
            # the FFN up-projection at this batch's shape: what one matmul of its size reaches
            tokens, hidden, inter = batch * seq, config.hidden_size, config.intermediate_size
            ffn = matmul_rate(tokens, hidden, inter, dtype, args.repeats, warm)
            rate = flops / seconds
            rows.append(
                [precision, f"{batch}x{seq}", flops / 1e9, seconds * 1e3, rate / 1e9, ffn / 1e9,
                 peak / 1e9, rate / peak]
            )  # fmt: skip
    headers = ["precision", "batch x pieces", "GFLOP", "ms", "achieved GFLOP/s",
               "FFN matmul GFLOP/s", "peak GFLOP/s", "fraction of peak"]  # fmt: skip
    notes = [
        f"encoder: NERTagger.encode ({describe(args.encoder)}: {config.num_hidden_layers}"
        f" layers, hidden {config.hidden_size}, FFN {config.intermediate_size}), inference_mode,"
        f" best of <= {args.repeats} (<= {BUDGET:g} s of timed runs per figure)",
        "FLOPs per layer: 2 T (4 H^2 + 2 H I) + 4 B S^2 H (embeddings, softmax, norms not counted)",
        "FFN matmul: [B*S, H] @ [H, I] alone, same dtype; peak and fraction are per dtype",
        *notes,
    ]
    # the precision this CPU computes in natively (the automatic precision picks it)
    row = next(r for r in rows if (r[0] == "bf16 autocast") == native_bf16())
    top = headline(
        f"encoder forward at {row[1]} pieces vs the matmul peak",
        "GFLOP/s",
        (f"ours, {row[0]}", row[4]),
        (f"torch.matmul peak, {row[0]}", row[6]),
    )
    report("encoder: achieved FLOP/s vs matmul peak", headers, rows, notes, args, top=top)


if __name__ == "__main__":
    main()
