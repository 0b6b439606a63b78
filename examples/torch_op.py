#!/usr/bin/env python3
"""volt8's MoE forward and rejection sampler as torch operators: eager, torch.compile(fullgraph=True),
and the compiled module replayed from a CUDA graph.

    pip install torch . && python3 examples/torch_op.py          # synthetic checkpoint, TP4 rank 1
    python3 examples/torch_op.py --checkpoint DIR --tp-size 4 --tp-rank 1

Needs a CUDA GPU, torch and the volt8 package (pip-installed, or bindings/python on PYTHONPATH).
"""
import argparse
import os
import sys
import tempfile

import torch

import volt8
import volt8.torch  # registers torch.ops.volt8.moe_forward and torch.ops.volt8.rejection_sample


class DraftLayer(torch.nn.Module):
    """Router, volt8's experts (through the operator) and a residual add."""

    def __init__(self, moe, top_k):
        super().__init__()
        shape = moe.experts.shape
        self.moe, self.top_k = moe, top_k
        self.router = torch.nn.Linear(shape.hidden, shape.num_experts, bias=False, dtype=torch.float16, device="cuda")

    def route(self, x):
        weights, ids = torch.topk(torch.softmax(self.router(x).float(), dim=-1), self.top_k, dim=-1)
        return ids.int(), weights / weights.sum(-1, keepdim=True)

    def forward(self, x, topk_ids, topk_weights):
        return x + self.moe(x, topk_ids, topk_weights)


def main(argv=None):
    parser = argparse.ArgumentParser(description="volt8's torch operators: eager, compiled, CUDA graph.")
    parser.add_argument("--checkpoint", help="checkpoint folder (default: write a synthetic one)")
    parser.add_argument("--tp-size", type=int, default=4)
    parser.add_argument("--tp-rank", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=8, help="M: tokens a forward")
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--experts", type=int, default=32, help="experts of the synthetic checkpoint")
    parser.add_argument("--target-arch", help="sm_70: run the Volta PTX through the driver (default: the GPU's own)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("torch_op: needs a CUDA GPU", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="volt8-torch-op-") as scratch:
        checkpoint = args.checkpoint
        if checkpoint is None:
            from mtp_step import write_synthetic_checkpoint  # this folder's other example
            checkpoint = write_synthetic_checkpoint(os.path.join(scratch, "ckpt"), num_experts=args.experts,
                                                    top_k=args.top_k)
        with torch.no_grad():  # inference: the operators have no gradient (nor do engines ask for one)
            return run(args, checkpoint)


def run(args, checkpoint):
    torch.manual_seed(0)
    ctx = volt8.Context(device=torch.cuda.current_device(), target_arch=args.target_arch)
    moe = volt8.torch.MoEExperts.load(ctx, checkpoint, tp_size=args.tp_size, tp_rank=args.tp_rank,
                                      max_tokens=args.tokens, max_top_k=args.top_k)
    moe.prepare([args.tokens])  # compile every kernel M tokens use now: nothing may compile during a capture
    layer = DraftLayer(moe, min(args.top_k, moe.experts.shape.num_experts))

    # Static inputs: a CUDA graph reads these addresses on every replay.
    x = torch.randn(args.tokens, moe.experts.shape.hidden, dtype=torch.float16, device="cuda")
    topk_ids, topk_weights = layer.route(x)
    eager = layer(x, topk_ids, topk_weights)

    compiled = torch.compile(layer, fullgraph=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm up outside the capture
        for _ in range(2):
            out = compiled(x, topk_ids, topk_weights)
    torch.cuda.current_stream().wait_stream(side)
    compiled_ok = torch.equal(out, eager)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = compiled(x, topk_ids, topk_weights)
    x.copy_(torch.randn_like(x))  # new data in the same buffers, then replay
    ids, weights = layer.route(x)
    topk_ids.copy_(ids)
    topk_weights.copy_(weights)
    graph.replay()
    replay_ok = torch.equal(static_out, layer(x, topk_ids, topk_weights))

    # The rejection sampler: drafts of 4 tokens for each of the M requests over a 1000-token vocabulary.
    ctx.prepare_sampler()
    draft_probs = torch.softmax(torch.randn(args.tokens, 4, 1000, device="cuda"), -1)
    target_probs = torch.softmax(torch.randn(args.tokens, 5, 1000, device="cuda"), -1)
    draft_ids = torch.multinomial(draft_probs.flatten(0, 1), 1).view(args.tokens, 4).int()
    out_ids, num_accepted = torch.ops.volt8.rejection_sample(target_probs, draft_ids, None, draft_probs, None,
                                                             0, 0, volt8.torch.register(ctx))
    host_ids, host_accepted = torch.ops.volt8.rejection_sample(target_probs.cpu(), draft_ids.cpu(), None,
                                                               draft_probs.cpu(), None, 0, 0, 0)
    torch.cuda.synchronize()
    sampler_ok = torch.equal(out_ids.cpu(), host_ids) and torch.equal(num_accepted.cpu(), host_accepted)

    print(f"volt8 {volt8.library_version()}, torch {torch.__version__}, {moe}")
    print(f"compiled matches eager: {compiled_ok}; graph replay matches eager: {replay_ok}; "
          f"accepted {num_accepted.tolist()}, GPU and host samplers agree: {sampler_ok}")
    graph.reset()  # before the experts' kernels are unloaded
    ctx.close()
    if not (compiled_ok and replay_ok and sampler_ok):
        print("torch_op: FAILED", file=sys.stderr)
        return 1
    print("torch_op: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
