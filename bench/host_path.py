#!/usr/bin/env python3
"""The host's cost of one eager MoE forward from Python, per call, at M = 1 (default):

    Experts.forward(x, ids, w, out, stream)   the binding with every argument given
    the same, two sets of tensors in turn      each call with other tensors than the call before
    Experts.forward(x, ids, w)                the binding allocating out, on torch's current stream
    torch.ops.volt8.moe_forward               the torch operator (a new out each call)
    torch.mm                                  x times an FP16 [hidden, 2 x intermediate] matrix, for scale
    volt8_moe_forward (ctypes)                the C call alone: one prepared argument struct, no checks
    the torch fast path, no C call            Experts.forward(x, ids, w, out, stream) with the C function
                                              replaced by a Python one that returns 0: the binding's share
    a ctypes call of one argument             volt8_ctx_early_launch(ctx): what any ctypes call costs

Each figure is the host time of a batch of calls divided by the calls (the median over the batches;
the stream is synchronised between batches, outside the timing, so the GPU never holds the host
back). The batches of the paths are interleaved (each round times one batch of every path, in turn),
so that a host whose speed drifts over a run moves every path alike; on experts built from random E4M3 weights at one rank's shape (default: the reference
model's TP4 rank 1; the kernels are the dispatched ones, compiled or read from the cache first).

    python3 bench/host_path.py [--tokens 1] [--top-k 8] [--experts 512] [--shape S] [--json FILE]

Needs a CUDA GPU, torch and the volt8 package (pip-installed, or bindings/python on PYTHONPATH with
VOLT8_LIBRARY naming a build). Exit 2 for a bad argument, 3 without a GPU.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shape_from_text(volt8, text):
    """A MoeShape from "key=value,..." (the volt8 command's S; keys left out keep the reference TP4 rank 1)."""
    fields = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in volt8.MoeShape.__dataclass_fields__ or not value.strip().isdigit():
            raise ValueError(f"--shape {text!r}: {item!r} is not key=number with a key of "
                             f"{', '.join(volt8.MoeShape.__dataclass_fields__)}")
        fields[key] = int(value)
    return volt8.MoeShape(**fields)


def random_experts(numpy, volt8, shape, seed):
    """(shape, w13, s13, w2, s2) of random finite E4M3 codes and scales of 2^-8 (FP16 bits of scale x 2^8 = 1)."""
    rng = numpy.random.default_rng(seed)
    layout = shape.layout()
    codes = lambda name: (rng.integers(0, 0x7F, layout[name], dtype=numpy.uint8)
                          | (rng.integers(0, 2, layout[name], dtype=numpy.uint8) << 7))
    scales = lambda name: numpy.full(layout[name], 0x3C00, dtype=numpy.uint16)
    return shape, codes("w13"), scales("s13"), codes("w2"), scales("s2")


def per_call_us(torch, cases, batches, calls):
    """{name: (median, min)} over batches of the host time per call, in microseconds; each round times
    one batch of every case, in turn."""
    for _, call in cases:
        for _ in range(3):
            call()
    torch.cuda.synchronize()
    results = {name: [] for name, _ in cases}
    for _ in range(batches):
        for name, call in cases:
            start = time.perf_counter()
            for _ in range(calls):
                call()
            elapsed = time.perf_counter() - start
            torch.cuda.synchronize()
            results[name].append(elapsed / calls * 1e6)
    return {name: (statistics.median(values), min(values)) for name, values in results.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description="per-call host microseconds of volt8's Python forward paths")
    parser.add_argument("--tokens", type=int, default=1, help="M (default 1)")
    parser.add_argument("--top-k", type=int, default=8, help="experts a token (default 8)")
    parser.add_argument("--experts", type=int, default=None, help="experts of the rank (default: the shape's)")
    parser.add_argument("--shape", default="", help="the rank's shape as key=value,... (default: reference TP4 rank 1)")
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--calls", type=int, default=100, help="calls a batch (default 100)")
    parser.add_argument("--json", help="write the figures to this file too")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
    import numpy
    import volt8
    for name in ("tokens", "top_k", "batches", "calls"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)} is not a positive number")
    try:
        shape = shape_from_text(volt8, args.shape)
    except ValueError as error:
        parser.error(str(error))
    if args.experts is not None:
        if args.experts < 1:
            parser.error(f"--experts {args.experts} is not a positive number")
        shape = volt8.MoeShape(**dict(shape.__dict__, num_experts=args.experts))
    try:
        import torch
    except ImportError:
        print("host_path: needs torch", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("host_path: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 3
    import volt8.torch

    top_k = min(args.top_k, shape.num_experts)
    ctx = volt8.Context(device=torch.cuda.current_device())
    experts = volt8.Experts.from_host(ctx, random_experts(numpy, volt8, shape, 1), max_tokens=args.tokens,
                                      max_top_k=top_k)
    experts.prepare([args.tokens])
    key = volt8.torch.register(experts)
    generator = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(args.tokens, shape.hidden, generator=generator, device="cuda").half()
    ids = torch.rand(args.tokens, shape.num_experts, generator=generator, device="cuda").argsort(1)[:, :top_k]
    ids = ids.int().contiguous()
    weights = torch.full((args.tokens, top_k), 1.0 / top_k, device="cuda")
    out = torch.empty_like(x)
    # A second set of tensors (other addresses, the same shapes), for calls that alternate between sets.
    sets = [(x, ids, weights, out), (x.clone(), ids.clone(), weights.clone(), torch.empty_like(x))]
    turn = [0]

    def alternating():
        turn[0] ^= 1
        experts.forward(*sets[turn[0]], stream)
    matrix = torch.randn(shape.hidden, 2 * shape.intermediate, generator=generator, device="cuda").half()
    stream = torch.cuda.current_stream().cuda_stream

    library = volt8._library.load()
    c_args = volt8._abi.MoeArgs(num_tokens=args.tokens, top_k=top_k, x=x.data_ptr(), topk_ids=ids.data_ptr(),
                                topk_weights=weights.data_ptr(), out=out.data_ptr())
    c_args_ref = ctypes.byref(c_args)
    c_forward, handle = library.volt8_moe_forward, experts.handle
    op = torch.ops.volt8.moe_forward.default

    def bare_c():
        if c_forward(handle, c_args_ref, stream):
            raise RuntimeError(volt8._library.last_error(ctx.handle))

    # Experts built the same way whose fast path calls a Python function in place of the C one.
    from volt8._torch_fast import ForwardCall
    stub_call = ForwardCall(ctx, library, shape.hidden)
    stub_call.function = lambda handle_, args_, stream_: 0

    def fast_path_without_c():
        stub_call(experts, x, ids, weights, out, stream, False, False)

    early_launch, ctx_handle = library.volt8_ctx_early_launch, ctx.handle

    cases = [
        ("Experts.forward(x, ids, w, out, stream)", lambda: experts.forward(x, ids, weights, out, stream)),
        ("the same, two sets of tensors in turn", alternating),
        ("Experts.forward(x, ids, w)", lambda: experts.forward(x, ids, weights)),
        ("torch.ops.volt8.moe_forward", lambda: op(x, ids, weights, key)),
        ("torch.mm", lambda: torch.mm(x, matrix)),
        ("volt8_moe_forward (ctypes)", bare_c),
        ("the torch fast path, no C call", fast_path_without_c),
        ("a ctypes call of one argument", lambda: early_launch(ctx_handle)),
    ]
    device = torch.cuda.get_device_name()
    print(f"host_path: {device}, torch {torch.__version__}, M={args.tokens} top_k={top_k} {shape}; "
          f"{args.batches} batches of {args.calls} calls")
    figures = {}
    with torch.inference_mode():
        timed = per_call_us(torch, cases, args.batches, args.calls)
    for name, _ in cases:
        median, best = timed[name]
        figures[name] = {"median_us": round(median, 2), "min_us": round(best, 2)}
        print(f"  {name:<42} {median:7.2f} us a call (best batch {best:.2f})")
    if args.json:
        with open(args.json, "w") as stream_out:
            json.dump({"device": device, "torch": torch.__version__, "tokens": args.tokens, "top_k": top_k,
                       "shape": shape.__dict__, "per_call": figures}, stream_out, indent=1)
    experts.close()
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
