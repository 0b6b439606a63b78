"""volt8.torch: the torch operators and MoEExperts. Without torch only the import checks run; with torch
and no GPU, the registrations, fake implementations, tracing and the host sampler's operator; on a GPU
(marked gpu, as test_gpu.py) torch.compile and CUDA-graph replay bit for bit against eager, and
torch.library.opcheck of both operators. VOLT8_REQUIRE_GPU=1 turns every skip into a failure."""
import os
import re
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import volt8
from conftest import REPO_ROOT
from fakes import RecordingContext
from test_gpu import TARGET_ARCH, _unavailable, ctx, load_case, routed_inputs, torch  # noqa: F401 (fixtures)

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(volt8.__file__)))
TOP_K = 4  # experts a token in the GPU tests
SHAPE = volt8.MoeShape(hidden=256, intermediate=64, num_experts=6, block_n=128, block_k=128, intermediate_offset=64)


def run_python(code, extra_path=()):
    """Runs `code` in a fresh interpreter that imports this volt8; returns (returncode, output)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(list(extra_path) + [PACKAGE_ROOT]))
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env)
    return run.returncode, run.stdout + run.stderr


def test_importing_volt8_never_imports_torch(tmp_path):
    # A torch that fails on import stands in for the real one, which may not be installed here.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise RuntimeError('volt8 imported torch')\n")
    code, output = run_python("""
        import sys
        import volt8
        volt8.library_version()
        volt8.Context(device=None).close()
        assert "torch" not in sys.modules, sorted(name for name in sys.modules if name.startswith("torch"))
        print("no torch")
    """, extra_path=[str(tmp_path)])
    assert code == 0 and "no torch" in output, output


def test_volt8_torch_without_torch_says_to_install_it():
    code, output = run_python("""
        import sys
        sys.modules["torch"] = None  # what an interpreter without torch sees
        try:
            import volt8.torch
        except ImportError as error:
            print("refused:", error)
    """)
    assert code == 0 and "refused: volt8.torch needs PyTorch" in output and "pip install torch" in output, output


@pytest.fixture(scope="module")
def torch_cpu():
    try:
        import torch
    except ImportError:
        _unavailable("no torch")
    return torch


@pytest.fixture(scope="module")
def vt(torch_cpu):
    import volt8.torch
    return volt8.torch


def recording_experts():
    return volt8.Experts(RecordingContext(), 0, SHAPE, max_tokens=8, max_top_k=2)


def test_operators_are_registered(torch_cpu, vt):
    forward = str(torch_cpu.ops.volt8.moe_forward.default._schema)
    sampler = str(torch_cpu.ops.volt8.rejection_sample.default._schema)
    assert forward == "volt8::moe_forward(Tensor x, Tensor topk_ids, Tensor topk_weights, SymInt experts_key) -> Tensor"
    assert sampler == ("volt8::rejection_sample(Tensor target_probs, Tensor? draft_ids, Tensor? num_draft, "
                       "Tensor? draft_probs, Tensor? greedy, SymInt seed, SymInt offset, SymInt ctx_key) "
                       "-> (Tensor, Tensor)")


def test_register_gives_one_key_per_live_object(vt):
    first, second = recording_experts(), recording_experts()
    key = vt.register(first)
    assert vt.register(first) == key and vt.register(second) != key
    assert vt.lookup(key, volt8.Experts) is first
    with pytest.raises(volt8.InvalidArgumentError, match=f"key {key}: names a volt8.Experts, the operator needs"):
        vt.lookup(key, volt8.Context)
    with pytest.raises(volt8.InvalidArgumentError, match="register: str is neither"):
        vt.register("experts")
    del first
    with pytest.raises(volt8.InvalidArgumentError, match=f"key {key}: no live Experts is registered"):
        vt.lookup(key, volt8.Experts)


def test_fake_implementations_give_shapes_dtypes_and_devices(torch_cpu, vt):
    torch = torch_cpu
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(5, SHAPE.hidden, dtype=torch.float16, device="cuda:0")
        ids = torch.empty(5, 2, dtype=torch.int32, device="cuda:0")
        out = torch.ops.volt8.moe_forward(x, ids, torch.empty(5, 2, device="cuda:0"), 12345)
        assert (tuple(out.shape), out.dtype, str(out.device), out.stride()) == ((5, 256), torch.float16, "cuda:0",
                                                                                (256, 1))
        target = torch.empty(3, 5, 100, device="cuda:0")
        drafts = torch.empty(3, 4, dtype=torch.int32, device="cuda:0")
        out_ids, accepted = torch.ops.volt8.rejection_sample(target, drafts, None, None, None, 0, 0, 9)
        assert (tuple(out_ids.shape), out_ids.dtype, str(out_ids.device)) == ((3, 5), torch.int32, "cuda:0")
        assert (tuple(accepted.shape), accepted.dtype, str(accepted.device)) == ((3,), torch.int32, "cuda:0")
        with pytest.raises(RuntimeError, match="x: needs float16"):
            torch.ops.volt8.moe_forward(x.float(), ids, ids.float(), 1)


def test_module_traces_whole_without_a_gpu(torch_cpu, vt):
    """torch.compile(fullgraph=True) of MoEExperts on meta tensors: traced through the fake implementation,
    the key a constant, no graph break; the dynamic second shape too."""
    torch = torch_cpu
    module = vt.MoEExperts(recording_experts())
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
    for tokens in (3, 7):
        x = torch.empty(tokens, SHAPE.hidden, dtype=torch.float16, device="meta")
        out = compiled(x, torch.empty(tokens, 2, dtype=torch.int32, device="meta"),
                       torch.empty(tokens, 2, device="meta"))
        assert (tuple(out.shape), out.dtype, out.device.type) == ((tokens, SHAPE.hidden), torch.float16, "meta")
    assert module.experts.ctx.calls == []  # the library was never reached


def test_operators_raise_volt8_errors(torch_cpu, vt):
    torch = torch_cpu
    x = torch.zeros(2, SHAPE.hidden, dtype=torch.float16)
    with pytest.raises(volt8.InvalidArgumentError, match="x: volt8::moe_forward runs on CUDA tensors"):
        torch.ops.volt8.moe_forward(x, torch.zeros(2, 2, dtype=torch.int32), torch.zeros(2, 2), 1)
    with pytest.raises(volt8.InvalidArgumentError, match="target_probs: dtype is float64, needs float32"):
        torch.ops.volt8.rejection_sample(torch.zeros(2, 3, 10, dtype=torch.float64),
                                         torch.zeros(2, 2, dtype=torch.int32), None, None, None, 0, 0, 0)


@pytest.mark.parametrize("name, module, x_dtypes", [("moe_forward", "volt8.torch", ("float16", "bfloat16")),
                                                     ("mtp_moe", "volt8.vllm.runtime", ("float16", "bfloat16"))])
def test_moe_operators_are_defined_alike(torch_cpu, vt, name, module, x_dtypes):
    """moe_forward and the vLLM plugin's mtp_moe come from one definition: the same schema, CPU tensors
    refused naming the operator, and fake implementations that take x of the operator's dtypes only."""
    torch = torch_cpu
    import importlib
    operator = getattr(importlib.import_module(module), name)
    assert operator is getattr(torch.ops.volt8, name).default
    assert str(operator._schema) == (f"volt8::{name}(Tensor x, Tensor topk_ids, Tensor topk_weights, "
                                     f"SymInt experts_key) -> Tensor")
    with pytest.raises(volt8.InvalidArgumentError, match=f"x: volt8::{name} runs on CUDA tensors, got CPU ones"):
        operator(torch.zeros(2, 8, dtype=torch.float16), torch.zeros(2, 2, dtype=torch.int32), torch.zeros(2, 2), 1)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        ids, weights = torch.empty(5, 2, dtype=torch.int32, device="cuda:0"), torch.empty(5, 2, device="cuda:0")
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            x = torch.empty(5, 8, dtype=dtype, device="cuda:0")
            if str(dtype).replace("torch.", "") in x_dtypes:
                out = operator(x, ids, weights, 1)
                assert (tuple(out.shape), out.dtype, str(out.device)) == ((5, 8), dtype, "cuda:0")
            else:
                needs = " or ".join(x_dtypes)
                with pytest.raises(RuntimeError, match=f"x: needs {needs} \\[M, hidden\\], got {dtype}"):
                    operator(x, ids, weights, 1)
        with pytest.raises(RuntimeError, match=r"topk_ids: has shape \[4, 2\], needs \[5, top_k\]"):
            operator(torch.empty(5, 8, dtype=torch.float16, device="cuda:0"), ids[:4], weights, 1)


class StubExperts:
    """What forward_converted reads of a volt8.Experts, recording each forward it is asked for."""

    def __init__(self, hidden=8, max_tokens=4):
        self.shape = types.SimpleNamespace(hidden=hidden)
        self.max_tokens = max_tokens
        self._torch_forward = None
        self.calls = []

    def forward(self, x, topk_ids, topk_weights, out, stream=None):
        self.calls.append((x.dtype, topk_ids.dtype, topk_weights.dtype, tuple(x.shape), x.is_contiguous(),
                           topk_ids.is_contiguous(), topk_weights.is_contiguous()))
        out.copy_(x * topk_weights.sum(dim=1, keepdim=True).to(x.dtype))


@pytest.mark.parametrize("operator_name", ["volt8::moe_forward", "volt8::mtp_moe"])
def test_what_engines_pass_is_converted_once_to_the_kernels_dtypes(torch_cpu, vt, operator_name):
    """bfloat16 or float16 x, int32 or int64 ids, float32, bfloat16 or float16 weights: each converted once
    (contiguous) to float16 / int32 / float32, a batch past max_tokens in pieces, out in x's dtype; 0 tokens
    runs no forward. The CPU stands in for the device here (the conversion is torch's, the same on both)."""
    torch = torch_cpu
    for x_dtype in (torch.float16, torch.bfloat16):
        for id_dtype in (torch.int32, torch.int64):
            for weight_dtype in (torch.float32, torch.bfloat16, torch.float16):
                stub = StubExperts()
                x = torch.arange(10 * 8, dtype=torch.float32).reshape(8, 10).t().to(x_dtype)  # not contiguous
                ids = torch.zeros(10, 2, dtype=id_dtype)
                weights = torch.full((10, 2), 0.5, dtype=weight_dtype)
                out = vt.forward_converted(stub, x, ids, weights, operator_name, lambda tokens: "")
                assert out.dtype == x_dtype and tuple(out.shape) == (10, 8)
                assert torch.equal(out, x), (x_dtype, id_dtype, weight_dtype)
                assert [call[3][0] for call in stub.calls] == [4, 4, 2]  # max_tokens 4: three forwards
                assert all(call[:3] == (torch.float16, torch.int32, torch.float32) and all(call[4:])
                           for call in stub.calls), stub.calls
    stub = StubExperts()
    empty = vt.forward_converted(stub, torch.empty(0, 8, dtype=torch.bfloat16), torch.empty(0, 2, dtype=torch.int64),
                                 torch.empty(0, 2, dtype=torch.bfloat16), operator_name, lambda tokens: "")
    assert (tuple(empty.shape), empty.dtype, stub.calls) == ((0, 8), torch.bfloat16, [])
    with pytest.raises(volt8.InvalidArgumentError, match=r"0 tokens of x \[0, 6\].*x needs \[0, 8\]"):
        vt.forward_converted(stub, torch.empty(0, 6, dtype=torch.float16), torch.empty(0, 2, dtype=torch.int32),
                             torch.empty(0, 2), operator_name, lambda tokens: "")
    for bad, message in (((torch.float32, torch.int32, torch.float32), "x: dtype float32; OP takes float16 or bfloat16"),
                         ((torch.float16, torch.int16, torch.float32), "topk_ids: dtype int16; OP takes int32 or int64"),
                         ((torch.float16, torch.int32, torch.float64),
                          "topk_weights: dtype float64; OP takes float32, bfloat16 or float16")):
        with pytest.raises(volt8.InvalidArgumentError, match=re.escape(message.replace("OP", operator_name))):
            vt.forward_converted(stub, torch.zeros(2, 8, dtype=bad[0]), torch.zeros(2, 2, dtype=bad[1]),
                                 torch.zeros(2, 2, dtype=bad[2]), operator_name, lambda tokens: "")
    assert stub.calls == []


def test_both_moe_operators_convert_through_one_function(torch_cpu, vt, monkeypatch):
    """moe_forward's and mtp_moe's CUDA kernels are the one forward_converted, each naming itself."""
    torch = torch_cpu
    import volt8.vllm.runtime as runtime
    experts = recording_experts()
    key = vt.register(experts)
    seen = []
    monkeypatch.setattr(vt, "forward_converted",
                        lambda experts_, x, ids, weights, operator, hint: seen.append((experts_, operator)) or x)
    x, ids, weights = torch.zeros(1, 8), torch.zeros(1, 1), torch.zeros(1, 1)
    vt._moe_forward_cuda(x, ids, weights, key)
    runtime._mtp_moe_cuda(x, ids, weights, key)
    assert seen == [(experts, "volt8::moe_forward"), (experts, "volt8::mtp_moe")]
    assert not hasattr(runtime, "_check_dtypes")


@pytest.mark.parametrize("name", ["moe_forward", "mtp_moe"])
def test_fake_implementations_take_what_engines_pass(torch_cpu, vt, name):
    torch = torch_cpu
    import volt8.vllm.runtime  # noqa: F401 (defines mtp_moe)
    operator = getattr(torch.ops.volt8, name).default
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        for tokens in (0, 3):
            x = torch.empty(tokens, 8, dtype=torch.bfloat16, device="cuda:0")
            ids = torch.empty(tokens, 2, dtype=torch.int64, device="cuda:0")
            out = operator(x, ids, torch.empty(tokens, 2, dtype=torch.float16, device="cuda:0"), 1)
            assert (tuple(out.shape), out.dtype) == ((tokens, 8), torch.bfloat16)
        x = torch.empty(3, 8, dtype=torch.float16, device="cuda:0")
        with pytest.raises(RuntimeError, match=r"topk_ids: needs int32 or int64, got torch.float32"):
            operator(x, torch.empty(3, 2, device="cuda:0"), torch.empty(3, 2, device="cuda:0"), 1)
        with pytest.raises(RuntimeError, match=r"topk_weights: needs float32, bfloat16 or float16, got torch.int32"):
            operator(x, torch.empty(3, 2, dtype=torch.int32, device="cuda:0"),
                     torch.empty(3, 2, dtype=torch.int32, device="cuda:0"), 1)
        with pytest.raises(RuntimeError, match=r"topk_weights: has shape \[3, 1\], needs \[3, 2\]"):
            operator(x, torch.empty(3, 2, dtype=torch.int32, device="cuda:0"), torch.empty(3, 1, device="cuda:0"), 1)


def sampler_inputs(torch, batch, k, vocab, seed, device="cpu"):
    generator = torch.Generator().manual_seed(seed)
    target = torch.softmax(torch.randn(batch, k + 1, vocab, generator=generator) * 3, -1)
    draft = torch.softmax(torch.randn(batch, k, vocab, generator=generator) * 3, -1)
    ids = torch.multinomial(draft.reshape(-1, vocab), 1, generator=generator).reshape(batch, k).int()
    num_draft = torch.randint(0, k + 1, (batch,), generator=generator, dtype=torch.int32)
    greedy = torch.rand(batch, generator=generator) < 0.25
    return [tensor.to(device) for tensor in (target, ids, num_draft, draft, greedy)]


def test_host_sampler_operator_draws_what_rejection_sample_draws(torch_cpu, vt):
    torch = torch_cpu
    target, ids, num_draft, draft, greedy = sampler_inputs(torch, 9, 3, 500, seed=1)
    target[4, 1, 7] = float("nan")
    out_ids, accepted = torch.ops.volt8.rejection_sample(target, ids, num_draft, draft, greedy, 5, 2, 0)
    host = volt8.rejection_sample(target.numpy(), ids.numpy(), num_draft.numpy(), draft.numpy(),
                                  greedy=greedy.numpy(), seed=5, offset=2, strict=False)
    np.testing.assert_array_equal(out_ids.numpy(), host.out_ids)
    np.testing.assert_array_equal(accepted.numpy(), host.num_accepted)
    assert (host.out_ids[4] == -1).all() and (host.out_ids[[0, 1, 2, 3, 5]] >= 0).any()


def test_host_sampler_operator_passes_opcheck_and_compiles(torch_cpu, vt):
    torch = torch_cpu
    target, ids, num_draft, draft, greedy = sampler_inputs(torch, 6, 2, 300, seed=2)
    op = torch.ops.volt8.rejection_sample.default
    for args in ((target, ids, num_draft, draft, greedy, 3, 1, 0), (target, ids, None, None, None, 3, 1, 0)):
        torch.library.opcheck(op, args)

    def verify(target, ids, draft, offset):
        out_ids, accepted = torch.ops.volt8.rejection_sample(target, ids, None, draft, None, 11, offset, 0)
        return out_ids, accepted + 0

    compiled = torch.compile(verify, fullgraph=True, backend="aot_eager")
    for offset in (0, 1, 2):  # the offset changing makes it a symbolic int after the first recompile
        expected, got = verify(target, ids, draft, offset), compiled(target, ids, draft, offset)
        assert all(torch.equal(a, b) for a, b in zip(expected, got)), f"offset {offset}"


# ---- on a GPU ----

def draft_module(torch, moe):
    """MoEExperts with a residual add, so the compiled graph holds torch's own kernels around the op."""

    class DraftMoE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.moe = moe

        def forward(self, x, topk_ids, topk_weights):
            return x + self.moe(x, topk_ids, topk_weights)

    return DraftMoE()


@pytest.fixture
def moe(torch, ctx, checkpoints):
    import volt8.torch
    experts, _ = load_case(ctx, checkpoints, "modelopt_mixed_indexed", 4, 1, {}, max_tokens=16, max_top_k=TOP_K)
    assert experts.max_top_k == TOP_K  # six experts in this checkpoint
    module = volt8.torch.MoEExperts(experts)
    yield module
    module.close()


@pytest.mark.gpu
def test_compiled_module_gives_the_eager_bits(torch, moe):
    module = draft_module(torch, moe)
    compiled = torch.compile(module, fullgraph=True)
    for tokens in (1, 5, 16):
        x, ids, weights = routed_inputs(torch, moe.experts.shape, tokens, TOP_K, seed=20 + tokens)
        eager = module(x, ids, weights)
        got = compiled(x, ids, weights)
        torch.cuda.synchronize()
        assert torch.equal(got, eager), f"M={tokens}: compiled and eager differ"
        assert torch.equal(eager, x + moe.experts.forward(x, ids, weights)), f"M={tokens}: the op is not the forward"


@pytest.mark.gpu
def test_capture_refuses_an_unprepared_token_count(torch, moe):
    x, ids, weights = routed_inputs(torch, moe.experts.shape, 6, TOP_K, seed=30)
    torch.cuda.synchronize()
    refused = torch.cuda.CUDAGraph()
    with pytest.raises(volt8.CaptureError, match=r"not prepared.*experts\.prepare\(\[6\]\)"):
        with torch.cuda.graph(refused):
            with pytest.raises(volt8.CaptureError, match="prepare before the capture begins"):
                moe.prepare([6])
            moe(x, ids, weights)
    refused.reset()
    moe.prepare([6])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = moe(x, ids, weights)
    graph.replay()
    eager = moe(x, ids, weights)
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    graph.reset()


@pytest.mark.gpu
def test_compiled_module_replays_in_a_cuda_graph(torch, moe):
    tokens = 8
    moe.prepare([tokens])
    module = draft_module(torch, moe)
    compiled = torch.compile(module, fullgraph=True)
    x, ids, weights = routed_inputs(torch, moe.experts.shape, tokens, TOP_K, seed=40)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compiles, then warms up, outside the capture
        for _ in range(2):
            compiled(x, ids, weights)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = compiled(x, ids, weights)
    for seed in (41, 42, 43):
        new_x, new_ids, new_weights = routed_inputs(torch, moe.experts.shape, tokens, TOP_K, seed=seed)
        x.copy_(new_x)
        ids.copy_(new_ids)
        weights.copy_(new_weights)
        graph.replay()
        eager = module(x, ids, weights)
        torch.cuda.synchronize()
        assert torch.equal(out, eager), f"replay with inputs of seed {seed} differs from eager"
    graph.reset()  # before the experts' kernels are unloaded


@pytest.mark.gpu
def test_forward_operator_takes_what_engines_pass(torch, moe):
    """bf16 x, int64 ids and fp16 weights give what float16 / int32 / float32 give (in x's dtype), 0 tokens
    an empty output, and more tokens than max_tokens run in pieces."""
    op = torch.ops.volt8.moe_forward.default
    for tokens in (1, 5, 16):
        x, ids, weights = routed_inputs(torch, moe.experts.shape, tokens, TOP_K, seed=70 + tokens)
        expected = op(x, ids, weights, moe.experts_key)
        for x_dtype, id_dtype, weight_dtype in ((torch.bfloat16, torch.int64, torch.float16),
                                                (torch.float16, torch.int64, torch.bfloat16),
                                                (torch.bfloat16, torch.int32, torch.float32)):
            got = op(x.to(x_dtype), ids.to(id_dtype), weights.to(weight_dtype), moe.experts_key)
            assert got.dtype == x_dtype
            reference = op(x.to(x_dtype).to(torch.float16), ids, weights.to(weight_dtype).to(torch.float32),
                           moe.experts_key)
            assert torch.equal(got.to(torch.float16), reference.to(x_dtype).to(torch.float16)), (tokens, x_dtype)
        assert expected.dtype == torch.float16
    empty = op(torch.empty(0, moe.experts.shape.hidden, dtype=torch.bfloat16, device="cuda"),
               torch.empty(0, TOP_K, dtype=torch.int64, device="cuda"), torch.empty(0, TOP_K, device="cuda"),
               moe.experts_key)
    assert tuple(empty.shape) == (0, moe.experts.shape.hidden) and empty.dtype == torch.bfloat16
    x, ids, weights = routed_inputs(torch, moe.experts.shape, 40, TOP_K, seed=79)  # max_tokens is 16
    whole = op(x, ids, weights, moe.experts_key)
    pieces = torch.cat([op(x[i:i + 16], ids[i:i + 16], weights[i:i + 16], moe.experts_key) for i in (0, 16, 32)])
    torch.cuda.synchronize()
    assert torch.equal(whole, pieces)


@pytest.mark.gpu
def test_forward_operator_passes_opcheck(torch, moe):
    x, ids, weights = routed_inputs(torch, moe.experts.shape, 5, TOP_K, seed=50)
    torch.library.opcheck(torch.ops.volt8.moe_forward.default, (x, ids, weights, moe.experts_key))


@pytest.mark.gpu
def test_gpu_sampler_operator_passes_opcheck_and_matches_the_host(torch, ctx):
    import volt8.torch
    ctx.prepare_sampler()
    key = volt8.torch.register(ctx)
    host_inputs = sampler_inputs(torch, 17, 4, 3000, seed=60)
    target, ids, num_draft, draft, greedy = [tensor.cuda() for tensor in host_inputs]
    op = torch.ops.volt8.rejection_sample.default
    for args in ((target, ids, num_draft, draft, greedy, 7, 4, key), (target, ids, None, None, None, 7, 4, key)):
        torch.library.opcheck(op, args)
        out_ids, accepted = op(*args)
        host_ids, host_accepted = op(*host_inputs[:1], *[None if a is None else a.cpu() for a in args[1:5]], 7, 4, 0)
        torch.cuda.synchronize()
        assert torch.equal(out_ids.cpu(), host_ids) and torch.equal(accepted.cpu(), host_accepted)


@pytest.mark.gpu
def test_example_torch_op_runs(torch):
    command = [sys.executable, os.path.join(REPO_ROOT, "examples", "torch_op.py"), "--experts", "8"]
    if TARGET_ARCH:
        command += ["--target-arch", TARGET_ARCH]
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
    assert "torch_op: ok" in run.stdout
