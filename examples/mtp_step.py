#!/usr/bin/env python3
"""A speculative-decoding MTP draft step the way a host engine runs it, on torch tensors.

The MTP layer's experts live in volt8 (FP8 E4M3 with their block scales, one tensor-parallel rank's
share); routing, embedding and the LM head stay in torch. One draft position (router -> volt8 MoE
forward -> LM head -> softmax) is captured into a torch.cuda.CUDAGraph and replayed K times per step,
feeding each sampled draft token back. A stand-in target distribution then verifies the K drafts
with volt8's rejection sampler on the GPU, and the host sampler checks it draws the same tokens.

    python3 examples/mtp_step.py                      # synthetic checkpoint, reference shape at TP4 rank 1
    python3 examples/mtp_step.py --checkpoint DIR --tp-size 4 --tp-rank 1

Needs a CUDA GPU, torch and the volt8 package: pip-installed (the wheel holds the library), or else
this checkout's bindings/python with libvolt8.so.0 reachable ($VOLT8_LIBRARY or LD_LIBRARY_PATH). With --checkpoint left out, a synthetic
checkpoint in the layout of the reference model's draft layer (ModelOpt mixed precision, E4M3 experts
under mtp.layers.0 with BF16 128x128 scales) is written to a temporary folder first.
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

try:
    import volt8  # the installed package (pip install volt8-*.whl)
except ImportError:  # a source checkout: its binding, with VOLT8_LIBRARY naming a build
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))
    import volt8  # noqa: E402

BLOCK = 128


# ---- the synthetic checkpoint (numpy only) ----

def _bf16_bits(values):
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _random_e4m3(rng, shape):
    """Uniform over the 254 finite codes (0x7F and 0xFF are NaN)."""
    codes = rng.integers(0, 254, size=shape, dtype=np.int32)
    return (codes + (codes >= 0x7F)).astype(np.uint8)


def _write_safetensors(path, tensors):
    """tensors: name -> (safetensors dtype, shape, numpy array of the raw bytes)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + data.nbytes]}
        offset += data.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as stream:
        stream.write(struct.pack("<Q", len(text)) + text)
        for _, _, data in tensors.values():
            stream.write(np.ascontiguousarray(data).tobytes())


def write_synthetic_checkpoint(folder, hidden=2560, intermediate=640, num_experts=32, top_k=8, seed=0):
    """config.json and model.safetensors of an MTP layer: the reference model's names, dtypes and
    metadata, random E4M3 weights and BF16 block scales in [5e-5, 2e-4] (max |w| 0.02..0.09)."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    tensors = {}
    for expert in range(num_experts):
        for projection, (rows, cols) in (("gate_proj", (intermediate, hidden)), ("up_proj", (intermediate, hidden)),
                                         ("down_proj", (hidden, intermediate))):
            prefix = f"mtp.layers.0.mlp.experts.{expert}.{projection}."
            tensors[prefix + "weight"] = ("F8_E4M3", (rows, cols), _random_e4m3(rng, (rows, cols)))
            blocks = (-(-rows // BLOCK), -(-cols // BLOCK))
            scales = rng.uniform(5e-5, 2e-4, size=blocks)
            tensors[prefix + "weight_scale_inv"] = ("BF16", blocks, _bf16_bits(scales))
    _write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
    config = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": hidden,
              "moe_intermediate_size": intermediate, "num_experts": num_experts, "num_experts_per_tok": top_k,
              "num_hidden_layers": 48, "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16",
              "quantization_config": {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": {
                  "model.layers.0.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16},
                  "mtp.layers.0.mlp.experts": {"quant_algo": "FP8_PB_WO", "group_size": 128}}}}
    with open(os.path.join(folder, "config.json"), "w") as stream:
        json.dump(config, stream, indent=1)
    return folder


# ---- the draft step ----

class MtpDrafter:
    """One rank's MTP layer: torch router, embedding and LM head around volt8's experts. (Under real
    tensor parallelism the experts' output is this rank's partial sum, all-reduced by the engine.)"""

    def __init__(self, torch, ctx, experts, batch, top_k, vocab, seed):
        self.torch, self.experts = torch, experts
        hidden, num_experts = experts.shape.hidden, experts.shape.num_experts
        device = torch.device("cuda", ctx.device)
        generator = torch.Generator(device=device).manual_seed(seed)
        normal = lambda *shape, scale: (torch.randn(*shape, generator=generator, device=device) * scale).half()
        self.router = normal(num_experts, hidden, scale=hidden ** -0.5)
        self.embedding = normal(vocab, hidden, scale=1.0)
        self.lm_head = normal(vocab, hidden, scale=4.0 * hidden ** -0.5)
        self.top_k = top_k
        # Static buffers: the captured graph reads and writes these addresses on every replay.
        self.hidden = torch.zeros(batch, hidden, dtype=torch.float16, device=device)
        self.topk_ids = torch.zeros(batch, top_k, dtype=torch.int32, device=device)
        self.topk_weights = torch.zeros(batch, top_k, dtype=torch.float32, device=device)
        self.moe_out = torch.zeros(batch, hidden, dtype=torch.float16, device=device)
        self.probs = torch.zeros(batch, vocab, dtype=torch.float32, device=device)
        self.graph = None

    def position(self):
        """Router -> volt8 experts -> LM head -> softmax, for the tokens in self.hidden."""
        torch = self.torch
        gate = torch.softmax((self.hidden @ self.router.t()).float(), dim=-1)
        weights, ids = torch.topk(gate, self.top_k, dim=-1)
        self.topk_weights.copy_(weights / weights.sum(-1, keepdim=True))
        self.topk_ids.copy_(ids)
        self.experts.forward(self.hidden, self.topk_ids, self.topk_weights, self.moe_out)
        logits = ((self.hidden + self.moe_out) @ self.lm_head.t()).float()
        self.probs.copy_(torch.softmax(logits, dim=-1))

    def capture(self):
        torch = self.torch
        self.experts.prepare([self.hidden.shape[0]])  # compile before capture: nothing compiles inside it
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: cuBLAS and the caching allocator settle outside capture
            for _ in range(2):
                self.position()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.position()

    def feed(self, tokens):
        """Next position's input: the sampled tokens' embeddings mixed with this position's output."""
        torch = self.torch
        mixed = self.embedding[tokens.long()].float() + self.moe_out.float()
        self.hidden.copy_((mixed * torch.rsqrt(mixed.pow(2).mean(-1, keepdim=True) + 1e-6)).half())

    def draft(self, start_tokens, draft_len, generator):
        """K draft tokens a request: ids [B, K] int32, their distributions [B, K, V], and the bonus row [B, V]."""
        torch = self.torch
        ids, probs = [], []
        self.moe_out.zero_()
        self.feed(start_tokens)
        for _ in range(draft_len):
            self.graph.replay()
            token = torch.multinomial(self.probs, 1, generator=generator).squeeze(1)
            ids.append(token.int())
            probs.append(self.probs.clone())
            self.feed(token)
        self.graph.replay()
        return torch.stack(ids, 1).contiguous(), torch.stack(probs, 1).contiguous(), self.probs.clone()

    def check_replay_matches_eager(self):
        """The graph's MoE output is bit-identical to an eager forward of the same inputs."""
        torch = self.torch
        self.graph.replay()
        eager = torch.empty_like(self.moe_out)
        self.experts.forward(self.hidden, self.topk_ids, self.topk_weights, eager)
        torch.cuda.synchronize()
        return torch.equal(eager, self.moe_out)


def target_distribution(torch, draft_probs, bonus, generator, temperature=0.8):
    """A stand-in for the target model: the draft's distributions, sharpened and perturbed. [B, K+1, V]."""
    rows = torch.cat([draft_probs, bonus[:, None]], dim=1)
    noise = torch.randn(rows.shape, generator=generator, device=rows.device)
    logits = rows.clamp_min(1e-30).log() / temperature + 0.5 * noise
    return torch.softmax(logits, dim=-1).contiguous()


def main(argv=None):
    parser = argparse.ArgumentParser(description="An MTP draft step on torch tensors with volt8's experts.")
    parser.add_argument("--checkpoint", help="checkpoint folder (default: write a synthetic one)")
    parser.add_argument("--draft-checkpoint", help="separate folder holding the MTP layer")
    parser.add_argument("--tp-size", type=int, default=4)
    parser.add_argument("--tp-rank", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8, help="requests decoded together")
    parser.add_argument("--draft-len", type=int, default=3, help="K drafts a request a step")
    parser.add_argument("--top-k", type=int, default=8, help="experts a token")
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--experts", type=int, default=32, help="experts of the synthetic checkpoint")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-arch", help="sm_70: run the Volta PTX through the driver (default: the GPU's own)")
    args = parser.parse_args(argv)
    if min(args.batch, args.draft_len, args.top_k, args.steps, args.experts) < 1 or args.vocab < 2:
        parser.error("--batch, --draft-len, --top-k, --steps and --experts must be positive, --vocab at least 2")

    import torch
    if not torch.cuda.is_available():
        print("mtp_step: needs a CUDA GPU", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="volt8-mtp-") as scratch:
        checkpoint = args.checkpoint or write_synthetic_checkpoint(os.path.join(scratch, "ckpt"),
                                                                   num_experts=args.experts, top_k=args.top_k,
                                                                   seed=args.seed)
        return run(torch, args, checkpoint)


def run(torch, args, checkpoint):
    device = torch.cuda.current_device()
    print(f"volt8 {volt8.library_version()} ({volt8.library_path()}), torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(device)}")
    with volt8.Context(device=device, target_arch=args.target_arch) as ctx:
        experts = volt8.Experts.load(ctx, checkpoint, tp_size=args.tp_size, tp_rank=args.tp_rank,
                                     draft_checkpoint_dir=args.draft_checkpoint, max_tokens=args.batch,
                                     max_top_k=args.top_k)
        shape, memory = experts.shape, experts.memory()
        print(f"experts: {shape.num_experts} x (hidden {shape.hidden}, intermediate {shape.intermediate} at offset "
              f"{shape.intermediate_offset}), {experts.load_report.route} route, target {ctx.target_arch}; "
              f"resident {memory.resident_bytes / 2**20:.2f} MiB (FP16 {memory.fp16_bytes / 2**20:.2f} MiB)")
        drafter = MtpDrafter(torch, ctx, experts, args.batch, min(args.top_k, shape.num_experts), args.vocab, args.seed)
        drafter.capture()
        ctx.prepare_sampler()
        generator = torch.Generator(device=f"cuda:{device}").manual_seed(args.seed + 1)
        tokens = torch.randint(0, args.vocab, (args.batch,), generator=generator, device=f"cuda:{device}")
        accepted_total, mismatches, invalid = 0, 0, 0
        for step in range(args.steps):
            draft_ids, draft_probs, bonus = drafter.draft(tokens, args.draft_len, generator)
            target_probs = target_distribution(torch, draft_probs, bonus, generator)
            result = volt8.rejection_sample(target_probs, draft_ids, draft_probs=draft_probs, seed=args.seed,
                                            offset=step, ctx=ctx)
            torch.cuda.synchronize()
            host = volt8.rejection_sample(target_probs.cpu().numpy(), draft_ids.cpu().numpy(),
                                          draft_probs=draft_probs.cpu().numpy(), seed=args.seed, offset=step)
            same = (np.array_equal(result.out_ids.cpu().numpy(), host.out_ids)
                    and np.array_equal(result.num_accepted.cpu().numpy(), host.num_accepted))
            mismatches += not same
            accepted = result.num_accepted
            accepted_total += int(accepted.sum())
            invalid += int((result.out_ids[:, 0] < 0).sum())  # the per-request error flag
            tokens = result.out_ids.gather(1, accepted.long()[:, None]).squeeze(1)  # the recovered or bonus token
            print(f"step {step}: accepted {accepted.tolist()} of {args.draft_len}; "
                  f"GPU and host samplers {'agree' if same else 'DIFFER'}")
        proposed = args.steps * args.batch * args.draft_len
        print(f"acceptance {accepted_total}/{proposed} = {accepted_total / proposed:.3f}, "
              f"{(accepted_total + args.steps * args.batch) / (args.steps * args.batch):.2f} tokens a request a step")
        replay_ok = drafter.check_replay_matches_eager()
        print(f"graph replay matches eager forward: {replay_ok}")
        drafter.graph.reset()  # before the context unloads the experts' kernels
        if mismatches or invalid or not replay_ok:
            print("mtp_step: FAILED", file=sys.stderr)
            return 1
    print("mtp_step: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
