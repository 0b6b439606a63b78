#!/usr/bin/env python3
"""Where the forward's error against the float64 reference comes from, on the CPU: the MoE forward of
docs/design.md ("The contract") computed with numpy at each family's rounding points, against the
reference's float64 (with its FP16 h), as relative L2 over the output.

    scripts/rounding_model.py [--hidden 2560 --intermediate 160 --experts 16 --top-k 10 --tokens 64]
                              [--tp N] [--seed S] [--fixture bench|gpu] [--json]

Rounding points (each a form of the forward):
- exact:      the cc, tok, mma and hmma families, and the tile and raw families since they apply their
              scales in FP32: FP16 x, each scale block's products of the codes' exact FP16 values summed
              in FP32 and scaled in FP32, h = FP16(silu(gate) * up), z = weight * (h . W2) in FP32, the
              top-k sum in FP32, out in FP16;
- z16:        exact, z rows stored in FP16 (the tile and raw downs: reduce_half);
- w16:        exact, every weight rounded to FP16 as code * scale (the tile and raw families before they
              applied their scales in FP32), gate_up's and down's;
- w16 gate_up, w16 down: the same rounding in one GEMM only;
- w16 z16:    the tile and raw families before: FP16 weights and FP16 z.
With --tp N (N > 1) each form runs on N ranks (I split in N slices) whose FP16 outputs are summed in
FP16 one rank after the other, as an all-reduce of FP16 partial outputs does; "reference" stays the
float64 forward of the whole layer.

--fixture bench draws what `volt8 bench` draws (harness/bench_problem.c: codes from N(0, (448/4)^2),
scales 2^8 / (112 sqrt(K)) times 2^U(-1/2, 1/2), x from N(0, 1), weights 0.05 + U(0, 1) normalized);
--fixture gpu what the GPU suites draw (tests/gpu/gpu_fixture.c: every finite code alike, stored scales
U(0.01, 0.05), x U(-1, 1)). The draws are numpy's, not the C programs' streams: the figures are those of
the same distributions, not of the same numbers."""
import argparse
import json
import sys

import numpy as np

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - the bootstrap's .venv has it
    ml_dtypes = None

BLOCK = 128
E4M3_MAX = 448.0


def e4m3_values(codes):
    """E4M3 codes (uint8) -> their values times 2^-8 as float64 (the bit-level conversion's value)."""
    return codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * 2.0 ** -8


def draw_problem(rng, hidden, intermediate, experts, top_k, tokens, fixture):
    if fixture == "bench":
        w13 = np.clip(rng.standard_normal((experts, 2 * intermediate, hidden)) * E4M3_MAX / 4, -E4M3_MAX, E4M3_MAX)
        w2 = np.clip(rng.standard_normal((experts, hidden, intermediate)) * E4M3_MAX / 4, -E4M3_MAX, E4M3_MAX)
        w13, w2 = (w.astype(ml_dtypes.float8_e4m3fn).view(np.uint8) for w in (w13, w2))
        def scales(shape, k):
            return (256.0 / (E4M3_MAX / 4 * np.sqrt(k)) * np.exp2(rng.random(shape) - 0.5)).astype(np.float16)
        x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    else:
        finite = np.array([c for c in range(256) if c & 0x7F != 0x7F], dtype=np.uint8)
        w13 = rng.choice(finite, (experts, 2 * intermediate, hidden))
        w2 = rng.choice(finite, (experts, hidden, intermediate))
        def scales(shape, k):
            return (0.01 + 0.04 * rng.random(shape)).astype(np.float16)
        x = (2 * rng.random((tokens, hidden)) - 1).astype(np.float16)
    row_blocks, k13_blocks, k2_blocks = -(-intermediate // BLOCK), -(-hidden // BLOCK), -(-intermediate // BLOCK)
    s13 = scales((experts, 2, row_blocks, k13_blocks), hidden)  # [e][gate, up][row block][k block], stored * 2^8
    s2 = scales((experts, -(-hidden // BLOCK), k2_blocks), intermediate)
    ids = np.stack([rng.permutation(experts)[:top_k] for _ in range(tokens)]).astype(np.int64)
    weights = 0.05 + rng.random((tokens, top_k))
    weights = (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)
    return dict(w13=w13, w2=w2, s13=s13, s2=s2, x=x, ids=ids, weights=weights)


def dequantized(problem, expert):
    """The expert's weights exactly (float64): gate and up rows [2I][H], down rows [H][I]."""
    w13, w2 = problem["w13"][expert], problem["w2"][expert]
    two_i, hidden = w13.shape
    intermediate = two_i // 2
    s13 = problem["s13"][expert].astype(np.float64)
    rows = np.arange(intermediate) // BLOCK
    gate = np.repeat(s13[0][rows], BLOCK, axis=1)[:, :hidden]
    up = np.repeat(s13[1][rows], BLOCK, axis=1)[:, :hidden]
    s2 = problem["s2"][expert].astype(np.float64)
    down = np.repeat(np.repeat(s2, BLOCK, axis=0)[:hidden], BLOCK, axis=1)[:, :intermediate]
    return e4m3_values(w13) * np.concatenate([gate, up]), e4m3_values(w2) * down


def silu(value):
    return value / (1.0 + np.exp(-value))


def forward(problem, experts_weights, form, rows=None):
    """One rank's output: float64 for the reference form, else FP16 (as float64). rows: the slice of I
    this rank holds (all of it when None)."""
    x, ids, weights = problem["x"], problem["ids"], problem["weights"]
    tokens, top_k = ids.shape
    reference = form == "reference"
    out = np.zeros((tokens, x.shape[1]), np.float64 if reference else np.float32)
    for expert in np.unique(ids):
        token, slot = np.nonzero(ids == expert)
        w13, w2 = experts_weights[expert]
        intermediate = w13.shape[0] // 2
        slice_ = np.arange(intermediate) if rows is None else rows
        w13 = np.concatenate([w13[slice_], w13[intermediate + slice_]])
        w2 = w2[:, slice_]
        if reference:
            y = x[token].astype(np.float64) @ w13.T
            half = len(slice_)
            h = (silu(y[:, :half]) * y[:, half:]).astype(np.float16).astype(np.float64)
            out[token] += weights[token, slot].astype(np.float64)[:, None] * (h @ w2.T)
            continue
        if form in ("w16", "w16 z16", "w16 gate_up"):
            w13 = w13.astype(np.float16)  # code * scale rounded to FP16 (round to nearest, as mul.rn.f16x2)
        if form in ("w16", "w16 z16", "w16 down"):
            w2 = w2.astype(np.float16)
        y = x[token].astype(np.float32) @ w13.astype(np.float32).T
        half = len(slice_)
        h = (silu(y[:, :half]) * y[:, half:]).astype(np.float32).astype(np.float16).astype(np.float32)
        z = weights[token, slot][:, None] * (h @ w2.astype(np.float32).T)
        if form.endswith("z16"):
            z = z.astype(np.float16).astype(np.float32)
        np.add.at(out, token, z)
    return out if reference else out.astype(np.float16).astype(np.float64)


FORMS = ("exact", "z16", "w16 gate_up", "w16 down", "w16", "w16 z16")


def relative_l2(value, reference):
    return float(np.linalg.norm(value - reference) / np.linalg.norm(reference))


def model(hidden, intermediate, experts, top_k, tokens, tp, seed, fixture):
    rng = np.random.default_rng(seed)
    problem = draw_problem(rng, hidden, intermediate, experts, top_k, tokens, fixture)
    experts_weights = {e: dequantized(problem, e) for e in range(experts)}
    reference = forward(problem, experts_weights, "reference")
    results = {"fp16(reference)": relative_l2(reference.astype(np.float16).astype(np.float64), reference)}
    width = intermediate // tp
    for form in FORMS:
        if tp == 1:
            value = forward(problem, experts_weights, form)
        else:
            value = None
            for rank in range(tp):
                partial = forward(problem, experts_weights, form, np.arange(rank * width, (rank + 1) * width))
                value = partial if value is None else (value + partial).astype(np.float16).astype(np.float64)
        results[form] = relative_l2(value, reference)
    return results


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=positive, default=2560)
    parser.add_argument("--intermediate", type=positive, default=160)
    parser.add_argument("--experts", type=positive, default=16)
    parser.add_argument("--top-k", type=positive, default=10)
    parser.add_argument("--tokens", type=positive, default=64)
    parser.add_argument("--tp", type=positive, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fixture", choices=("bench", "gpu"), default="bench")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON object")
    args = parser.parse_args(argv)
    if ml_dtypes is None:
        parser.error("needs ml_dtypes (the .venv of scripts/bootstrap.sh has it)")
    if args.top_k > args.experts:
        parser.error(f"--top-k {args.top_k}: more than --experts {args.experts}")
    if args.intermediate % args.tp:
        parser.error(f"--tp {args.tp}: does not split --intermediate {args.intermediate}")
    results = model(args.hidden, args.intermediate, args.experts, args.top_k, args.tokens, args.tp, args.seed,
                    args.fixture)
    if args.json:
        print(json.dumps(results))
    else:
        for form, error in results.items():
            print(f"{form:16s} {error:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
