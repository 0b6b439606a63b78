"""On a GPU, with torch: the forward against a torch float64 reference, CUDA-graph capture, the GPU
sampler against the host one, and examples/mtp_step.py. Skipped without a GPU, unless
VOLT8_REQUIRE_GPU=1 (the GPU check), which turns every such skip into a failure.
VOLT8_TARGET_ARCH=sm_70 runs the compute_70 PTX through the driver, as the C GPU suites do."""
import os
import subprocess
import sys

import numpy as np
import pytest

import volt8
from conftest import REPO_ROOT
from checkpoint_cases import manifest_options

pytestmark = pytest.mark.gpu
TARGET_ARCH = os.environ.get("VOLT8_TARGET_ARCH") or None

# (case, tp_size, tp_rank, extra load options): the reference slice (offset 32), other offsets, the online route.
CASES = [("real_shape", 4, 1, {}), ("modelopt_mixed_indexed", 4, 3, {}), ("fp8_runtime_names", 8, 5, {}),
         ("modelopt_4d_hf_quant_config", 1, 0, {}), ("bf16_fused", 4, 2, {"online_block_n": 1}),
         ("f16_per_expert_opt_in_config", 8, 1, {})]


def _unavailable(reason):
    if os.environ.get("VOLT8_REQUIRE_GPU") == "1":
        pytest.fail(f"VOLT8_REQUIRE_GPU=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def torch():
    try:
        import torch
    except ImportError:
        _unavailable("no torch")
    if not torch.cuda.is_available():
        _unavailable("no GPU: torch.cuda.is_available() is False")
    return torch


@pytest.fixture(scope="module")
def ctx(torch):
    try:
        context = volt8.Context(device=torch.cuda.current_device(), target_arch=TARGET_ARCH)
    except volt8.Error as error:
        _unavailable(f"no volt8 context: {error}")
    if not context.has_device:
        _unavailable(f"volt8 sees no GPU: {context.last_error}")
    yield context
    context.close()


def load_case(ctx, checkpoints, case, tp, rank, extra, max_tokens=32, max_top_k=4):
    folder, manifest = checkpoints
    entry = manifest["valid"][case]
    kwargs = dict(manifest_options(folder, entry["options"]), **extra)
    path = os.path.join(folder, entry["dir"])
    experts = volt8.Experts.load(ctx, path, tp_size=tp, tp_rank=rank, max_tokens=max_tokens, max_top_k=max_top_k,
                                 **kwargs)
    host = volt8.load_host_checkpoint(path, tp_size=tp, tp_rank=rank, **kwargs)
    return experts, host


def dequantized(torch, host, device):
    """(W13 [E, 2I, H], W2 [E, H, I]) in float64 on `device`, from the host arrays."""
    shape = host.shape
    as_values = lambda codes: torch.from_numpy(np.array(codes)).view(torch.float8_e4m3fn).to(torch.float64)
    as_scales = lambda bits: torch.from_numpy(np.array(bits).view(np.float16)).to(torch.float64) / 256.0
    s13, s2 = as_scales(host.s13), as_scales(host.s2)
    rows = (shape.intermediate_offset + torch.arange(shape.intermediate)) // shape.block_n
    cols = torch.arange(shape.hidden) // shape.block_k
    gate = s13[:, 0][:, rows][:, :, cols]
    up = s13[:, 1][:, rows][:, :, cols]
    w13 = as_values(host.w13) * torch.cat([gate, up], dim=1)
    down_rows = torch.arange(shape.hidden) // shape.block_n
    down_cols = (shape.intermediate_offset + torch.arange(shape.intermediate)) // shape.block_k
    w2 = as_values(host.w2) * s2[:, down_rows][:, :, down_cols]
    return w13.to(device), w2.to(device)


def torch_reference(torch, shape, w13, w2, x, topk_ids, topk_weights):
    """float64 [M, H]: h = fp16(silu(gate) * up); out[t] = sum_j w[t, j] * (h . W2^T)."""
    tokens, top_k = topk_ids.shape
    x64 = x.to(torch.float64)
    pair_token = torch.arange(tokens, device=x.device).repeat_interleave(top_k)
    pair_expert = topk_ids.reshape(-1).long()
    pair_weight = topk_weights.reshape(-1).to(torch.float64)
    out = torch.zeros(tokens, shape.hidden, dtype=torch.float64, device=x.device)
    for expert in range(shape.num_experts):
        pairs = (pair_expert == expert).nonzero().squeeze(1)
        if pairs.numel() == 0:
            continue
        y = x64[pair_token[pairs]] @ w13[expert].t()
        gate, up = y[:, :shape.intermediate], y[:, shape.intermediate:]
        h = (torch.nn.functional.silu(gate) * up).to(torch.float16).to(torch.float64)
        out.index_add_(0, pair_token[pairs], pair_weight[pairs, None] * (h @ w2[expert].t()))
    return out


def routed_inputs(torch, shape, tokens, top_k, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(tokens, shape.hidden, generator=generator, device="cuda").half()
    scores = torch.rand(tokens, shape.num_experts, generator=generator, device="cuda")
    ids = scores.argsort(dim=1)[:, :top_k].int().contiguous()
    weights = torch.softmax(torch.randn(tokens, top_k, generator=generator, device="cuda"), dim=1).contiguous()
    return x, ids, weights


def relative_l2(torch, reference, result):
    return (torch.linalg.norm(result.to(torch.float64) - reference) / torch.linalg.norm(reference)).item()


@pytest.mark.parametrize("case, tp, rank, extra", CASES, ids=[f"{c[0]}-tp{c[1]}r{c[2]}" for c in CASES])
def test_forward_matches_torch_float64_reference(torch, ctx, checkpoints, case, tp, rank, extra):
    experts, host = load_case(ctx, checkpoints, case, tp, rank, extra)
    shape = experts.shape
    assert shape == host.shape
    w13, w2 = dequantized(torch, host, "cuda")
    top_k = min(4, shape.num_experts)
    for tokens in (1, 5, 32):
        x, ids, weights = routed_inputs(torch, shape, tokens, top_k, seed=tokens)
        out = experts.forward(x, ids, weights)
        again = torch.empty_like(out)
        experts.forward(x, ids, weights, again)
        torch.cuda.synchronize()
        reference = torch_reference(torch, shape, w13, w2, x, ids, weights)
        error = relative_l2(torch, reference, out)
        assert error <= 1e-3, f"{case} tp{tp} rank{rank} M={tokens}: relative L2 {error:.3g}"
        assert torch.equal(out, again), f"{case} M={tokens}: two forwards differ"
    memory = experts.memory()
    assert memory.weight_bytes == 3 * shape.num_experts * shape.hidden * shape.intermediate
    assert memory.resident_bytes >= memory.weight_bytes + memory.scale_bytes and memory.workspace_bytes > 0
    experts.close()


def test_prefill_sizes_past_one_grid(torch, ctx, checkpoints):
    """70000 tokens of top-4 (280000 pairs): more tokens and pairs than one launch's grid holds, cut into
    several launches, against the float64 reference; the load reports the workspace it took, and one
    too large for the GPU raises OutOfMemoryError naming max_tokens and the bytes."""
    tokens, top_k = 70000, 4
    experts, host = load_case(ctx, checkpoints, "modelopt_mixed_indexed", 2, 1, {}, max_tokens=tokens, max_top_k=top_k)
    assert experts.load_report.workspace_bytes == experts.memory().workspace_bytes > tokens * top_k * 4 * 256
    w13, w2 = dequantized(torch, host, "cuda")
    x, ids, weights = routed_inputs(torch, experts.shape, tokens, top_k, seed=7)
    out = experts.forward(x, ids, weights)
    torch.cuda.synchronize()
    error = relative_l2(torch, torch_reference(torch, experts.shape, w13, w2, x, ids, weights), out)
    assert error <= 1e-3, f"M={tokens}: relative L2 {error:.3g}"
    experts.close()
    free_before, _ = torch.cuda.mem_get_info()
    with pytest.raises(volt8.OutOfMemoryError, match=r"max_tokens 100000000 x max_top_k 6 is \d+ bytes"):
        load_case(ctx, checkpoints, "modelopt_mixed_indexed", 1, 0, {}, max_tokens=100_000_000, max_top_k=16)
    assert torch.cuda.mem_get_info()[0] >= free_before - (64 << 20), "the failed load left memory allocated"


def test_from_host_gives_the_same_bits(torch, ctx, checkpoints):
    experts, host = load_case(ctx, checkpoints, "modelopt_mixed_indexed", 4, 1, {})
    uploaded = volt8.Experts.from_host(ctx, host, max_tokens=32, max_top_k=4)
    assert uploaded.shape == experts.shape
    x, ids, weights = routed_inputs(torch, experts.shape, 9, 3, seed=1)
    a, b = experts(x, ids, weights), uploaded(x, ids, weights)
    torch.cuda.synchronize()
    assert torch.equal(a, b)


def test_torch_cuda_graph_replays_the_eager_forward(torch, ctx, checkpoints):
    experts, _ = load_case(ctx, checkpoints, "real_shape", 4, 1, {}, max_tokens=8, max_top_k=2)
    tokens = 6
    experts.prepare([tokens])
    x, ids, weights = routed_inputs(torch, experts.shape, tokens, 2, seed=2)
    out = torch.empty_like(x)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        experts.forward(x, ids, weights, out)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        experts.forward(x, ids, weights, out)
    for seed in (3, 4):
        new_x, new_ids, new_weights = routed_inputs(torch, experts.shape, tokens, 2, seed=seed)
        x.copy_(new_x)
        ids.copy_(new_ids)
        weights.copy_(new_weights)
        graph.replay()
        eager = experts.forward(x, ids, weights)
        torch.cuda.synchronize()
        assert torch.equal(out, eager), f"replay {seed} differs from the eager forward"
    graph.reset()  # before the experts' kernels are unloaded


def test_volt8_graph_and_capture_errors(torch, ctx, checkpoints):
    experts, _ = load_case(ctx, checkpoints, "modelopt_mixed_indexed", 2, 1, {}, max_tokens=16, max_top_k=2)
    x, ids, weights = routed_inputs(torch, experts.shape, 16, 2, seed=5)
    out = torch.empty_like(x)
    with pytest.raises(volt8.CaptureError, match="volt8_experts_prepare"):
        experts.capture(x, ids, weights, out)  # nothing compiled yet: capturing would have to compile
    experts.prepare([16])
    stream = torch.cuda.Stream()
    graph = experts.capture(x, ids, weights, out, stream=stream)
    torch.cuda.synchronize()  # the inputs were made on the default stream
    graph.launch(stream)
    stream.synchronize()
    eager = experts.forward(x, ids, weights)
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    graph.close()
    with pytest.raises(volt8.InvalidArgumentError, match="closed"):
        graph.launch()


def test_bad_ids(torch, ctx, checkpoints):
    experts, _ = load_case(ctx, checkpoints, "modelopt_mixed_indexed", 1, 0, {}, max_tokens=4, max_top_k=2)
    x, ids, weights = routed_inputs(torch, experts.shape, 4, 2, seed=6)
    ids[2, 1] = experts.shape.num_experts
    with pytest.raises(volt8.InvalidArgumentError, match=r"topk_ids\[2\]\[1\] = 6 outside \[0, 6\)"):
        experts.forward(x, ids, weights, check_ids=True)
    experts.forward(x, ids, weights)
    assert experts.bad_id_count() == 1


def test_expert_parallel_ranks_sum_to_the_single_rank_forward(torch, ctx, checkpoints):
    """Three EP ranks of one checkpoint as three handles on this GPU: given the same global ids, their outputs
    sum to the single-rank forward and to the float64 reference; an id outside [0, E) is a bad id on every
    rank, another rank's expert is not."""
    single, host = load_case(ctx, checkpoints, "modelopt_mixed_indexed", 1, 0, {})
    shape = single.shape
    w13, w2 = dequantized(torch, host, "cuda")
    ranks = []
    for ep_rank in range(3):
        start, count = volt8.expert_range(shape.num_experts, 3, ep_rank)
        rank, _ = load_case(ctx, checkpoints, "modelopt_mixed_indexed", 1, 0,
                            {"expert_start": start, "expert_count": count})
        assert (rank.shape.num_experts, rank.shape.expert_start, rank.shape.model_experts) == (count, start, 6)
        ranks.append(rank)
    for tokens in (1, 8, 32):
        x, ids, weights = routed_inputs(torch, shape, tokens, 4, seed=20 + tokens)
        ids[0, 1] = shape.num_experts
        whole = single.forward(x, ids, weights)
        parts = [torch.full_like(whole, float("nan")) for _ in ranks]
        for rank, part in zip(ranks, parts):
            rank.forward(x, ids, weights, part)
        torch.cuda.synchronize()
        summed = sum(part.to(torch.float64) for part in parts)
        reference = torch_reference(torch, shape, w13, w2, x, ids, weights)
        assert relative_l2(torch, reference, summed) <= 1e-3, f"M={tokens}: EP sum against the reference"
        assert relative_l2(torch, whole.to(torch.float64), summed) <= 1e-3, f"M={tokens}: EP sum against one rank"
        assert [rank.bad_id_count() for rank in ranks] == [1, 1, 1], f"M={tokens}"
    for rank in ranks:
        rank.close()
    single.close()


def test_torch_tensors_are_checked(torch, ctx, checkpoints):
    experts, _ = load_case(ctx, checkpoints, "modelopt_mixed_indexed", 1, 0, {}, max_tokens=4, max_top_k=2)
    x, ids, weights = routed_inputs(torch, experts.shape, 4, 2, seed=7)
    with pytest.raises(volt8.InvalidArgumentError, match="x: needs a CUDA device array"):
        experts.forward(x.cpu(), ids, weights)
    with pytest.raises(volt8.InvalidArgumentError, match="x: is not C-contiguous"):
        experts.forward(torch.empty(experts.shape.hidden, 4, dtype=torch.float16, device="cuda").t(), ids, weights)
    with pytest.raises(volt8.InvalidArgumentError, match="topk_weights: dtype is float16"):
        experts.forward(x, ids, weights.half())
    with pytest.raises(volt8.InvalidArgumentError, match="x: __cuda_array_interface__ is not available"):
        experts.forward(x.float().requires_grad_().half(), ids, weights)
    if torch.cuda.device_count() > 1:
        with pytest.raises(volt8.InvalidArgumentError, match="is on CUDA device 1"):
            experts.forward(x.to("cuda:1"), ids, weights)


def test_gpu_sampler_draws_what_the_host_sampler_draws(torch, ctx):
    generator = torch.Generator(device="cuda").manual_seed(8)
    batch, k, vocab = 33, 4, 5000
    target = torch.softmax(torch.randn(batch, k + 1, vocab, generator=generator, device="cuda") * 3, -1).contiguous()
    draft = torch.softmax(torch.randn(batch, k, vocab, generator=generator, device="cuda") * 3, -1).contiguous()
    ids = torch.multinomial(draft.reshape(-1, vocab), 1, generator=generator).reshape(batch, k).int().contiguous()
    num_draft = torch.randint(0, k + 1, (batch,), generator=generator, device="cuda", dtype=torch.int32)
    greedy = torch.rand(batch, generator=generator, device="cuda") < 0.25
    target[5, 0, 7] = float("nan")
    for draft_probs in (draft, None):
        result = volt8.rejection_sample(target, ids, num_draft, draft_probs, greedy=greedy, seed=21, offset=3, ctx=ctx)
        torch.cuda.synchronize()
        host = volt8.rejection_sample(target.cpu().numpy(), ids.cpu().numpy(), num_draft.cpu().numpy(),
                                      None if draft_probs is None else draft_probs.cpu().numpy(),
                                      greedy=greedy.cpu().numpy(), seed=21, offset=3, strict=False)
        np.testing.assert_array_equal(result.out_ids.cpu().numpy(), host.out_ids)
        np.testing.assert_array_equal(result.num_accepted.cpu().numpy(), host.num_accepted)
        assert (host.out_ids[5] == -1).all()


def test_example_mtp_step_runs(torch):
    script = os.path.join(REPO_ROOT, "examples", "mtp_step.py")
    command = [sys.executable, script, "--experts", "8", "--steps", "2", "--vocab", "4096", "--batch", "4"]
    if TARGET_ARCH:
        command += ["--target-arch", TARGET_ARCH]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
    assert "graph replay matches eager forward: True" in run.stdout and "mtp_step: ok" in run.stdout
