#!/usr/bin/env python3
"""Tensor-parallel experts across GPUs: each process loads one TP rank of the MTP layer's experts with
volt8 on its own GPU, runs the forward, and the partial outputs are summed with
torch.distributed.all_reduce (NCCL), the way a host engine does it. Rank 0 checks the sum against a TP1
forward on its GPU and against the double-precision reference (relative L2 <= 1e-3); every rank
captures forward plus all-reduce in one CUDA graph and checks its replay bit for bit against eager.
It prints each rank's memory (volt8 against FP16) and the times of the forward, of the all-reduce alone
and of both.

    torchrun --nproc-per-node 4 examples/tp_mtp_step.py                        # the reference shape
    torchrun --nproc-per-node 2 examples/tp_mtp_step.py --shape glm-4.5-air    # GLM-4.5-Air's experts
    torchrun --nproc-per-node 2 examples/tp_mtp_step.py --checkpoint DIR
    python3 examples/tp_mtp_step.py --host-only --tp-size 4                    # no GPU, no torch

--shape is a name (reference: hidden 2560, intermediate 640, 32 experts, top_k 8; glm-4.5-air: hidden
4096, intermediate 1408, 16 experts, top_k 8, its per-expert shape with few experts), key=value pairs
over the reference shape, or a name followed by such pairs: "glm-4.5-air,num_experts=4". Without
--checkpoint, rank 0 writes a synthetic checkpoint of that shape (examples/mtp_step.py's) to a
temporary folder of this host and shares its path; with one, only top_k is taken from --shape.

One host only (torchrun --standalone). Each process takes GPU LOCAL_RANK mod the GPU count. With
fewer GPUs than processes they share them round-robin; NCCL refuses two ranks on one GPU, so the
all-reduce then goes through gloo in host memory, outside the graph: that run proves volt8's side
(per-rank load, forward, partial sums, graph replay) but not NCCL over links.

--host-only needs neither torch nor a GPU: each rank's slice is loaded into host memory, its partial
output computed by the double-precision reference, and the partials summed and compared with the
TP1 reference (the float64 sum, and float16 partials summed in float16 as a GPU all-reduce does).

Exits 0 when every check passes, 1 naming each failed check, 2 on bad arguments.
"""
import os

# NVLink multicast (NVLS) off in NCCL, PyTorch's symmetric memory and NVSHMEM, before torch.distributed
# starts: on shared multi-GPU hosts a program using it can put the GPUs out of service. Forced rather
# than defaulted, so an inherited "1" cannot switch it back on.
for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                      ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_name] = _value

import argparse  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mtp_step import volt8, write_synthetic_checkpoint  # noqa: E402  (its import finds a checkout's binding)

SHAPES = {"reference": {"hidden": 2560, "intermediate": 640, "num_experts": 32, "top_k": 8},
          "glm-4.5-air": {"hidden": 4096, "intermediate": 1408, "num_experts": 16, "top_k": 8}}
TOLERANCE = 1e-3  # relative L2 against the float64 reference, as the GPU suites use
EXACT_TOLERANCE = 1e-12  # float64 partials against float64 TP1: only the summation order differs


# ---- arguments ----

def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def token_counts(text):
    return [positive_int(item) for item in text.split(",")]


def experts_shape(text):
    """A name, key=value pairs over the reference shape, or a name then pairs."""
    items = [item.strip() for item in text.split(",")]
    shape = dict(SHAPES["reference"])
    if items and "=" not in items[0]:
        name = items.pop(0)
        if name not in SHAPES:
            raise argparse.ArgumentTypeError(f"{name!r} is neither a shape name ({', '.join(SHAPES)}) nor key=value")
        shape = dict(SHAPES[name])
    for item in items:
        key, _, value = item.partition("=")
        if key not in shape:
            raise argparse.ArgumentTypeError(f"{item!r}: needs key=value, key one of {', '.join(shape)}")
        try:
            shape[key] = positive_int(value)
        except argparse.ArgumentTypeError as error:
            raise argparse.ArgumentTypeError(f"{item!r}: {error}") from None
    for key in ("hidden", "intermediate"):
        if shape[key] % 16:
            raise argparse.ArgumentTypeError(f"{key}={shape[key]}: volt8 needs a multiple of 16")
    if shape["top_k"] > shape["num_experts"]:
        raise argparse.ArgumentTypeError(f"top_k={shape['top_k']}: more than num_experts={shape['num_experts']}")
    return shape


def parse_arguments(argv=None, environ=os.environ):
    parser = argparse.ArgumentParser(description="volt8's experts under tensor parallelism, summed with NCCL.")
    parser.add_argument("--checkpoint", help="checkpoint folder (default: a synthetic one of --shape)")
    parser.add_argument("--shape", type=experts_shape, default=experts_shape("reference"),
                        help="synthetic checkpoint shape: reference, glm-4.5-air, and/or hidden=,intermediate=,"
                             "num_experts=,top_k= (default: reference)")
    parser.add_argument("--tokens", type=token_counts, default=[1, 8, 64], help="M values (default 1,8,64)")
    parser.add_argument("--seed", type=int, default=0, help="synthetic weights and routing")
    parser.add_argument("--repeats", type=positive_int, default=50, help="graph replays a timing")
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                        help="all-reduce backend (auto: NCCL when every process has its own GPU, else gloo)")
    parser.add_argument("--target-arch", help="sm_70: run the Volta PTX through the driver (default: the GPU's own)")
    parser.add_argument("--host-only", action="store_true", help="the reference check on the CPU, no torch")
    parser.add_argument("--tp-size", type=positive_int,
                        help="TP ranks: --host-only's (default 2); under torchrun it must equal WORLD_SIZE")
    args = parser.parse_args(argv)
    if args.checkpoint is not None and not os.path.isdir(args.checkpoint):
        parser.error(f"--checkpoint {args.checkpoint}: not a folder")
    if args.host_only:
        args.tp_size = args.tp_size or 2
    elif "WORLD_SIZE" not in environ or "RANK" not in environ:
        parser.error("no WORLD_SIZE and RANK: start it with torchrun --nproc-per-node N, or pass --host-only")
    else:
        world = int(environ["WORLD_SIZE"])
        if args.tp_size not in (None, world):
            parser.error(f"--tp-size {args.tp_size}: torchrun started {world} processes (WORLD_SIZE)")
        args.tp_size = world
    intermediate = args.shape["intermediate"]
    if args.checkpoint is None and (intermediate % args.tp_size or intermediate // args.tp_size % 16):
        parser.error(f"--tp-size {args.tp_size}: intermediate {intermediate} does not split into "
                     f"{args.tp_size} slices of a multiple of 16")
    return args


# ---- shared by both modes ----

def routed_inputs(hidden, num_experts, top_k, tokens, seed):
    """x float16 [M, H], distinct expert ids int32 [M, K] and softmax weights float32 [M, K]; the same
    on every rank for the same seed."""
    rng = np.random.default_rng([seed, tokens])
    x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    ids = np.ascontiguousarray(rng.random((tokens, num_experts)).argsort(axis=1)[:, :top_k].astype(np.int32))
    logits = rng.standard_normal((tokens, top_k))
    weights = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return x, ids, weights.astype(np.float32)


def synthetic_checkpoint(folder, args):
    shape = args.shape
    return write_synthetic_checkpoint(folder, hidden=shape["hidden"], intermediate=shape["intermediate"],
                                      num_experts=shape["num_experts"], top_k=shape["top_k"], seed=args.seed)


def describe_memory(label, shape, memory):
    mib = 2.0 ** 20
    return (f"{label}: intermediate {shape.intermediate} at offset {shape.intermediate_offset}; volt8 resident "
            f"{memory.resident_bytes / mib:.2f} MiB + workspace {memory.workspace_bytes / mib:.2f} MiB, FP16 "
            f"{memory.fp16_bytes / mib:.2f} MiB ({memory.resident_bytes / memory.fp16_bytes:.3f}x)")


def check(failures, label, error, tolerance):
    ok = error <= tolerance  # NaN fails
    if not ok:
        failures.append(f"{label}: relative L2 {error:.3g} above {tolerance:g}")
    return f"{error:.3g}"


def finish(failures):
    for failure in failures:
        print(f"tp_mtp_step: FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


# ---- host only ----

def run_host(args, folder):
    tp_size = args.tp_size
    full = volt8.load_host_checkpoint(folder)
    ranks = [volt8.load_host_checkpoint(folder, tp_size=tp_size, tp_rank=rank) for rank in range(tp_size)]
    shape = full.shape
    top_k = min(args.shape["top_k"], shape.num_experts)
    print(f"tp_mtp_step --host-only: TP{tp_size} of hidden {shape.hidden}, intermediate {shape.intermediate}, "
          f"{shape.num_experts} experts, top_k {top_k}")
    for plan in volt8.plan(folder, tp_size).ranks:
        print("  " + describe_memory(f"planned rank {plan.rank}", plan.shape, plan.memory))
    failures = []
    for tokens in args.tokens:
        x, ids, weights = routed_inputs(shape.hidden, shape.num_experts, top_k, tokens, args.seed)
        reference = volt8.reference_moe_forward(full, x, ids, weights)
        partials = [volt8.reference_moe_forward(rank, x, ids, weights) for rank in ranks]
        exact = np.sum(partials, axis=0)
        half = partials[0].astype(np.float16)
        for partial in partials[1:]:  # as an all-reduce sums float16 outputs: each step rounds
            half = (half + partial.astype(np.float16)).astype(np.float16)
        exact_error = check(failures, f"M={tokens}: float64 partials against TP1",
                            volt8.relative_l2(reference, exact), EXACT_TOLERANCE)
        half_error = check(failures, f"M={tokens}: float16 partials against TP1",
                           volt8.relative_l2(reference, half), TOLERANCE)
        print(f"M={tokens}: sum of {tp_size} partials against the TP1 reference: relative L2 {exact_error} "
              f"(float64), {half_error} (float16 sums)")
    if not failures:
        print("tp_mtp_step: ok (host only)")
    return finish(failures)


# ---- GPU ranks ----

class RankStep:
    """One rank's forward into `partial` and its all-reduce into `summed`, on fixed buffers a CUDA graph
    can replay. captured_reduce: NCCL (runs on the GPU stream, so it goes into the graph); gloo's goes
    through host memory and runs eagerly after each replay."""

    def __init__(self, torch, dist, experts, inputs, captured_reduce):
        self.torch, self.dist, self.experts = torch, dist, experts
        device = torch.device("cuda", experts.ctx.device)
        self.x, self.ids, self.weights = (torch.from_numpy(array).to(device) for array in inputs)
        self.partial = torch.zeros_like(self.x)
        self.summed = torch.zeros_like(self.x)
        self.captured_reduce = captured_reduce

    def forward(self):
        self.experts.forward(self.x, self.ids, self.weights, self.partial)

    def reduce(self):
        if self.captured_reduce:
            self.summed.copy_(self.partial)
            self.dist.all_reduce(self.summed)
        else:
            host = self.partial.cpu()
            self.dist.all_reduce(host)
            self.summed.copy_(host)

    def both(self):
        self.forward()
        self.reduce()

    def eager(self):
        """(partial, sum) of an eager forward and all-reduce, in fresh tensors."""
        partial = self.experts.forward(self.x, self.ids, self.weights)
        summed = partial.clone()
        if self.captured_reduce:
            self.dist.all_reduce(summed)
        else:
            host = summed.cpu()
            self.dist.all_reduce(host)
            summed.copy_(host)
        return partial, summed


def capture(torch, function):
    """function's kernels in a torch.cuda.CUDAGraph, warmed up on a side stream first (as mtp_step does)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            function()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # thread_local: CUDA calls of other threads (the NCCL watchdog's) cannot invalidate this capture
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        function()
    return graph


def median_us(torch, step, repeats):
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in pairs:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return 1000.0 * statistics.median(start.elapsed_time(end) for start, end in pairs)


def run_tokens(torch, dist, experts, args, tokens, top_k, captured_reduce):
    """Graphs, the bit-for-bit replay check and the timings of one M on this rank: (step, result dict)."""
    shape = experts.shape
    step = RankStep(torch, dist, experts, routed_inputs(shape.hidden, shape.num_experts, top_k, tokens, args.seed),
                    captured_reduce)
    forward_graph = capture(torch, step.forward)
    graphs = [forward_graph]
    if captured_reduce:
        reduce_graph, both_graph = capture(torch, step.reduce), capture(torch, step.both)
        graphs += [reduce_graph, both_graph]
        replay_reduce, replay_both = reduce_graph.replay, both_graph.replay
    else:
        replay_reduce = step.reduce

        def replay_both():
            forward_graph.replay()
            step.reduce()
    replay_both()
    partial, summed = step.eager()
    torch.cuda.synchronize()
    result = {"forward_bits": torch.equal(partial, step.partial), "sum_bits": torch.equal(summed, step.summed),
              "sum_difference": float((summed.double() - step.summed.double()).norm() / summed.double().norm())}
    dist.barrier()  # rank 0 was busy with its checks: time with every rank ready
    result["forward_us"] = median_us(torch, forward_graph.replay, args.repeats)
    result["reduce_us"] = median_us(torch, replay_reduce, args.repeats)
    result["both_us"] = median_us(torch, replay_both, args.repeats)
    for graph in graphs:
        graph.reset()  # before the experts' kernels are unloaded
    return step, result


def rank0_checks(tp1, full_host, step, tokens, failures):
    """The sum against a TP1 forward on this GPU and against the float64 reference; a printable line."""
    summed = step.summed.cpu().numpy()
    tp1_out = tp1.forward(step.x, step.ids, step.weights).cpu().numpy()
    inputs = (step.x.cpu().numpy(), step.ids.cpu().numpy(), step.weights.cpu().numpy())
    reference = volt8.reference_moe_forward(full_host, *inputs)
    errors = (check(failures, f"M={tokens}: the sum against the float64 reference",
                    volt8.relative_l2(reference, summed), TOLERANCE),
              check(failures, f"M={tokens}: the sum against the TP1 forward",
                    volt8.relative_l2(tp1_out.astype(np.float64), summed), TOLERANCE),
              check(failures, f"M={tokens}: the TP1 forward against the float64 reference",
                    volt8.relative_l2(reference, tp1_out), TOLERANCE))
    return "sum vs reference {}, sum vs TP1 {}, TP1 vs reference {}".format(*errors)


def report_tokens(tokens, results, line, repeats, failures):
    for rank, result in enumerate(results):
        if not result["forward_bits"]:
            failures.append(f"M={tokens} rank {rank}: the graph's forward differs from the eager forward")
        if not result["sum_bits"]:
            failures.append(f"M={tokens} rank {rank}: the graph's all-reduce differs from the eager one "
                            f"(relative L2 {result['sum_difference']:.3g})")
    slowest = {key: max(result[key] for result in results) for key in ("forward_us", "reduce_us", "both_us")}
    bits = "bit-identical" if all(r["forward_bits"] and r["sum_bits"] for r in results) else "DIFFERENT"
    print(f"M={tokens}: {line}; replay {bits} to eager on every rank")
    print(f"  forward {slowest['forward_us']:.1f} us, all-reduce {slowest['reduce_us']:.1f} us, forward + "
          f"all-reduce {slowest['both_us']:.1f} us (median of {repeats} replays, slowest rank)")


def announce(torch, world, gpus, backend):
    if backend == "nccl":
        version = torch.cuda.nccl.version()
        backend += " " + (".".join(map(str, version)) if isinstance(version, tuple) else str(version))
    print(f"tp_mtp_step: TP{world}, volt8 {volt8.library_version()}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0)}, {backend}")
    if gpus < world:
        print(f"tp_mtp_step: {world} processes share {gpus} GPU(s) round-robin: this proves the code path "
              f"(per-rank load, forward, partial sums, graph replay) but not NCCL over links"
              + ("; NCCL refuses two ranks on one GPU, so gloo sums in host memory" if backend == "gloo" else ""))


def shared_folder(dist, rank, args):
    """The checkpoint folder every rank reads: --checkpoint, or one rank 0 writes and shares. (path, scratch)."""
    if args.checkpoint:
        return args.checkpoint, None
    box = [None]
    if rank == 0:
        box[0] = tempfile.mkdtemp(prefix="volt8-tp-")
        synthetic_checkpoint(os.path.join(box[0], "ckpt"), args)
    dist.broadcast_object_list(box, src=0)  # the others wait here until it is written
    return os.path.join(box[0], "ckpt"), box[0] if rank == 0 else None


def run_ranks(args):
    import torch
    import torch.distributed as dist
    if not torch.cuda.is_available():
        print("tp_mtp_step: needs CUDA GPUs (or --host-only)", file=sys.stderr)
        return 2
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    gpus = torch.cuda.device_count()
    device = local_rank % gpus
    torch.cuda.set_device(device)
    backend = args.backend if args.backend != "auto" else ("nccl" if gpus >= world else "gloo")
    if backend == "nccl":
        dist.init_process_group("nccl", device_id=torch.device("cuda", device))
    else:
        dist.init_process_group("gloo")
    if rank == 0:
        announce(torch, world, gpus, backend)
    folder, scratch = shared_folder(dist, rank, args)
    try:
        code = run_rank(torch, dist, args, folder, rank, world, device, backend == "nccl")
        dist.barrier()  # every rank is done with the folder
    finally:  # after an exception, no barrier: this process exits and torchrun stops the others
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    dist.destroy_process_group()
    return code


def run_rank(torch, dist, args, folder, rank, world, device, captured_reduce):
    failures = []
    with volt8.Context(device=device, target_arch=args.target_arch) as ctx:
        experts = volt8.Experts.load(ctx, folder, tp_size=world, tp_rank=rank, max_tokens=max(args.tokens),
                                     max_top_k=args.shape["top_k"])
        experts.prepare(sorted(set(args.tokens)))  # compile before capture: nothing compiles inside it
        shape = experts.shape
        top_k = min(args.shape["top_k"], shape.num_experts)
        memories = [None] * world
        dist.all_gather_object(memories, (shape, experts.memory(), device))
        tp1 = full_host = None
        if rank == 0:
            print(f"checkpoint {folder}: hidden {shape.hidden}, {shape.num_experts} experts, top_k {top_k}")
            for index, (rank_shape, memory, rank_device) in enumerate(memories):
                print("  " + describe_memory(f"rank {index} on GPU {rank_device}", rank_shape, memory))
            tp1 = volt8.Experts.load(ctx, folder, max_tokens=max(args.tokens), max_top_k=top_k)
            full_host = volt8.load_host_checkpoint(folder)
            print("  " + describe_memory(f"TP1 on GPU {device}", tp1.shape, tp1.memory()))
        for tokens in args.tokens:
            step, result = run_tokens(torch, dist, experts, args, tokens, top_k, captured_reduce)
            results = [None] * world
            dist.all_gather_object(results, result)
            if rank == 0:
                line = rank0_checks(tp1, full_host, step, tokens, failures)
                report_tokens(tokens, results, line, args.repeats, failures)
    everyone = [None] * world
    dist.all_gather_object(everyone, failures)
    if rank != 0:
        return 1 if any(everyone) else 0
    if not failures:
        print(f"tp_mtp_step: ok (TP{world}, M = {', '.join(map(str, args.tokens))})")
    return finish(failures)


def main(argv=None):
    args = parse_arguments(argv)
    if not args.host_only:
        return run_ranks(args)
    with tempfile.TemporaryDirectory(prefix="volt8-tp-host-") as scratch:
        folder = args.checkpoint or synthetic_checkpoint(os.path.join(scratch, "ckpt"), args)
        return run_host(args, folder)


if __name__ == "__main__":
    sys.exit(main())
