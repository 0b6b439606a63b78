"""The vLLM plugin's GPU half (volt8.vllm.runtime), which imports no vLLM, on a GPU: a rank's experts
staged tensor by tensor as vLLM's loader hands them over, uploaded, and torch.ops.volt8.mtp_moe with an
engine's dtypes (bfloat16 x, int64 ids) against the float64 reference, eager, under torch.compile and in
a CUDA graph. Skipped without a GPU (VOLT8_REQUIRE_GPU=1 turns the skip into a failure); with torch
and no GPU, the operator's registration and fake implementation."""
import os

import numpy as np
import pytest

import volt8
from test_gpu import ctx, dequantized, relative_l2, torch  # noqa: F401 (fixtures)
from test_host_path import recorded  # noqa: F401 (fixture)
from test_vllm_staging import feed, read_safetensors

TOP_K = 4


@pytest.fixture(scope="module")
def torch_cpu():
    return pytest.importorskip("torch", reason="no torch")


def test_operator_is_registered_with_a_fake_implementation(torch_cpu):
    """With torch and no GPU: the schema, the fake implementation's shapes and dtypes, and CPU tensors refused."""
    torch = torch_cpu
    import volt8.vllm.runtime  # noqa: F401 (registers the operator)
    op = torch.ops.volt8.mtp_moe.default
    assert str(op._schema) == ("volt8::mtp_moe(Tensor x, Tensor topk_ids, Tensor topk_weights, SymInt experts_key) "
                               "-> Tensor")
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        for dtype in (torch.bfloat16, torch.float16):
            x = torch.empty(5, 256, dtype=dtype, device="cuda:0")
            out = op(x, torch.empty(5, 4, dtype=torch.int64, device="cuda:0"), torch.empty(5, 4, device="cuda:0"), 7)
            assert (tuple(out.shape), out.dtype, str(out.device)) == ((5, 256), dtype, "cuda:0")
        with pytest.raises(RuntimeError, match="x: needs float16 or bfloat16"):
            op(x.float(), torch.empty(5, 4, dtype=torch.int64, device="cuda:0"), torch.empty(5, 4, device="cuda:0"), 7)
    with pytest.raises(volt8.InvalidArgumentError, match="x: volt8::mtp_moe runs on CUDA tensors"):
        op(torch.zeros(2, 256, dtype=torch.bfloat16), torch.zeros(2, 4, dtype=torch.int64), torch.zeros(2, 4), 1)


def test_operator_converts_once_and_runs_m_beyond_max_tokens_as_several_forwards(recorded):  # noqa: F811
    """With torch and no GPU: the operator's CUDA implementation called on CPU tensors posing as device 0's,
    the C call recorded: bfloat16 x and int64 ids converted to FP16 and int32 copies, 19 tokens at
    max_tokens 8 as forwards of 8, 8 and 3 tokens over consecutive rows, the output in x's dtype."""
    experts, calls, torch = recorded
    import volt8.torch
    from volt8.vllm import runtime
    key = volt8.torch.register(experts)
    hidden = experts.shape.hidden
    x = torch.randn(19, hidden).to(torch.bfloat16)
    ids = torch.zeros(19, 4, dtype=torch.int64)
    weights = torch.full((19, 4), 0.25, dtype=torch.bfloat16)
    out = runtime._mtp_moe_cuda(x, ids, weights, key)
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    assert [call[2:4] + call[9:] for call in calls] == [(8, 4, 900), (8, 4, 900), (3, 4, 900)]  # current stream
    first = calls[0]
    for index, call in enumerate(calls):
        rows = 8 * index
        assert call[4] == first[4] + rows * hidden * 2 and call[5] == first[5] + rows * 4 * 4, index  # x16, ids32
        assert call[6] == first[6] + rows * 4 * 4 and call[7] == first[7] + rows * hidden * 2, index  # weights, out
    assert first[4] != x.data_ptr() and first[5] != ids.data_ptr()  # converted copies
    calls.clear()
    x16, ids32, weights32 = x.half(), ids.int(), weights.float()
    assert runtime._mtp_moe_cuda(x16[:5], ids32[:5], weights32[:5], key).dtype == torch.float16
    assert [call[4:7] for call in calls] == [(x16.data_ptr(), ids32.data_ptr(), weights32.data_ptr())]  # no copies


def staged(checkpoints, case, tp, rank, ep_size=1, ep_rank=0, block_n=0):
    """(ExpertStaging, HostCheckpoint) of one rank of a fixture checkpoint."""
    from volt8.vllm.staging import ExpertStaging
    folder, manifest = checkpoints
    entry = manifest["valid"][case]
    path = os.path.join(folder, entry["dir"])
    start, count = volt8.expert_range(entry["experts"], ep_size, ep_rank)
    count = count if ep_size > 1 else 0
    staging = ExpertStaging(entry["hidden"], entry["intermediate"], entry["experts"], tp, rank, start, count,
                            online_block_n=block_n)
    feed(staging, read_safetensors(path), entry["prefix"])
    online = {"mtp_expert_quantization": "fp8", "online_block_n": block_n} if block_n else {}
    host = volt8.load_host_checkpoint(path, tp_size=tp, tp_rank=rank, expert_start=start, expert_count=count, **online)
    return staging, host


def reference(torch, host, x, ids, weights):
    """float64 [M, H] of the rank's experts (global ids; other ranks' experts contribute nothing)."""
    shape = host.shape
    w13, w2 = dequantized(torch, host, x.device)
    x64 = x.to(torch.float16).to(torch.float64)
    tokens, top_k = ids.shape
    out = torch.zeros(tokens, shape.hidden, dtype=torch.float64, device=x.device)
    for t in range(tokens):
        for j in range(top_k):
            local = int(ids[t, j]) - shape.expert_start
            if not 0 <= local < shape.num_experts:
                continue
            y = w13[local] @ x64[t]
            h = (torch.nn.functional.silu(y[:shape.intermediate]) * y[shape.intermediate:]).half().double()
            out[t] += float(weights[t, j]) * (w2[local] @ h)
    return out


def router_inputs(torch, shape, tokens, seed, x_dtype=None, id_dtype=None):
    """x, int64 ids over the model's experts and float32 weights, as vLLM's router gives them."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(tokens, shape.hidden, generator=generator, device="cuda").to(x_dtype or torch.bfloat16)
    scores = torch.rand(tokens, shape.model_experts, generator=generator, device="cuda")
    weights, ids = torch.topk(torch.softmax(scores, -1), TOP_K, dim=-1)
    return x, ids.to(id_dtype or torch.int64), weights


@pytest.fixture
def mtp(torch, ctx, checkpoints):  # noqa: F811 (the fixtures)
    from volt8.vllm.runtime import MtpExperts
    made = []

    def make(case="modelopt_mixed_indexed", tp=4, rank=1, max_tokens=16, **options):
        staging, host = staged(checkpoints, case, tp, rank, **options)
        experts = MtpExperts(ctx, staging, max_tokens=max_tokens, max_top_k=TOP_K)
        assert staging.nbytes == 0  # released once uploaded
        made.append(experts)
        return experts, host

    yield make
    for experts in made:
        experts.close()


@pytest.mark.gpu
@pytest.mark.parametrize("options", [dict(), dict(ep_size=2, ep_rank=1), dict(case="bf16_fused", block_n=128),
                                     dict(case="bf16_fused", tp=4, rank=2, block_n=1)],
                         ids=["native-tp4r1", "native-tp4r1-ep2r1", "online128-tp4r1", "online1-tp4r2"])
def test_eager_matches_the_float64_reference(torch, mtp, options):
    experts, host = mtp(**options)
    for tokens, x_dtype, id_dtype in ((1, torch.bfloat16, torch.int64), (5, torch.float16, torch.int32),
                                      (40, torch.bfloat16, torch.int64)):  # 40 > max_tokens: three forwards
        x, ids, weights = router_inputs(torch, host.shape, tokens, seed=tokens, x_dtype=x_dtype, id_dtype=id_dtype)
        out = experts.apply(x, ids, weights)
        step = experts.experts.max_tokens  # the forwards the operator makes of it
        direct = torch.cat([experts.experts.forward(x[start:start + step].half(), ids[start:start + step].int(),
                                                    weights[start:start + step]) for start in range(0, tokens, step)])
        torch.cuda.synchronize()
        assert out.dtype == x_dtype and out.shape == x.shape
        assert torch.equal(out, direct.to(x_dtype)), f"M={tokens}: the operator is not the forward"
        error = relative_l2(torch, reference(torch, host, x, ids, weights), out)
        assert error <= (5e-3 if x_dtype == torch.bfloat16 else 1e-3), f"{options} M={tokens}: relative L2 {error:.3g}"


def draft_block(torch, experts):
    class Block(torch.nn.Module):
        def forward(self, x, ids, weights):
            return x + experts.apply(x, ids, weights)

    return Block()


@pytest.mark.gpu
def test_compiled_and_graph_replays_give_the_eager_bits(torch, mtp):
    experts, host = mtp()
    block = draft_block(torch, experts)
    compiled = torch.compile(block, fullgraph=True)
    for tokens in (1, 7):
        x, ids, weights = router_inputs(torch, host.shape, tokens, seed=100 + tokens)
        eager, got = block(x, ids, weights), compiled(x, ids, weights)
        torch.cuda.synchronize()
        assert torch.equal(eager, got), f"M={tokens}: compiled differs from eager"

    tokens = 8
    experts.prepare([tokens, 1, 4096])  # capped at max_tokens
    x, ids, weights = router_inputs(torch, host.shape, tokens, seed=200)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            compiled(x, ids, weights)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = compiled(x, ids, weights)
    for seed in (201, 202):
        new = router_inputs(torch, host.shape, tokens, seed=seed)
        for static, value in zip((x, ids, weights), new):
            static.copy_(value)
        graph.replay()
        eager = block(x, ids, weights)
        torch.cuda.synchronize()
        assert torch.equal(out, eager), f"replay with seed {seed} differs from eager"
        error = relative_l2(torch, reference(torch, host, x, ids, weights), out - x)
        assert error <= 1e-2, f"replay {seed}: relative L2 {error:.3g}"
    graph.reset()


@pytest.mark.gpu
def test_capture_of_an_unprepared_count_says_to_prepare(torch, mtp):
    experts, host = mtp(max_tokens=32)
    x, ids, weights = router_inputs(torch, host.shape, 3, seed=300)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(volt8.CaptureError, match=r"MtpExperts\.prepare\(\[3\]\)"):
        with torch.cuda.graph(graph):
            experts.apply(x, ids, weights)
    graph.reset()


@pytest.mark.gpu
def test_operator_passes_opcheck(torch, mtp):
    experts, host = mtp()
    x, ids, weights = router_inputs(torch, host.shape, 5, seed=400)
    torch.library.opcheck(torch.ops.volt8.mtp_moe.default, (x, ids, weights, experts.key))


@pytest.mark.gpu
def test_operator_refuses_other_dtypes(torch, mtp):
    experts, host = mtp()
    x, ids, weights = router_inputs(torch, host.shape, 2, seed=500)
    with pytest.raises(volt8.InvalidArgumentError, match="x: dtype torch.float32; volt8::mtp_moe takes"):
        experts.apply(x.float(), ids, weights)
    with pytest.raises(volt8.InvalidArgumentError, match="topk_ids: dtype torch.int16"):
        experts.apply(x, ids.to(torch.int16), weights)
    assert np.isfinite(experts.apply(x, ids, weights).float().cpu().numpy()).all()


@pytest.mark.gpu
@pytest.mark.parametrize("layer_set", ["mtp", "all"])
def test_the_layer_sets_on_one_gpu(torch, mtp, layer_set):
    """VOLT8_VLLM_LAYERS: mtp gives volt8 one layer (the MTP layer's experts); all also the target's block-FP8
    ones, so one process holds several layers at once, of different ranks' widths and offsets, run one
    after the other as a model does (each layer's input the one before's output), eagerly and replayed
    from one CUDA graph; every layer matches the float64 reference on its own input."""
    made = [mtp(tp=4, rank=1)]
    if layer_set == "all":
        made += [mtp(tp=4, rank=0), mtp(tp=2, rank=1), mtp(case="fp8_runtime_names", tp=8, rank=5)]
    tokens = 6
    hidden = made[0][1].shape.hidden
    assert all(host.shape.hidden == hidden for _, host in made)
    for experts, _ in made:
        experts.prepare([tokens])
    inputs = [router_inputs(torch, host.shape, tokens, seed=600 + index) for index, (_, host) in enumerate(made)]
    x0 = inputs[0][0].clone()

    def model(x):
        for (experts, _), (_, ids, weights) in zip(made, inputs):
            x = experts.apply(x, ids, weights)
        return x

    eager_inputs = [x0]
    for (experts, _), (_, ids, weights) in zip(made, inputs):
        eager_inputs.append(experts.apply(eager_inputs[-1], ids, weights))
    torch.cuda.synchronize()
    for index, ((experts, host), (_, ids, weights)) in enumerate(zip(made, inputs)):
        error = relative_l2(torch, reference(torch, host, eager_inputs[index], ids, weights), eager_inputs[index + 1])
        assert error <= 5e-3, f"{layer_set} layer {index}: relative L2 {error:.3g}"
    x = x0.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager_inputs[-1]), f"{layer_set}: the replayed layers differ from eager"
    graph.reset()
