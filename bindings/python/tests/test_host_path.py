"""The forward's fast path for torch tensors (volt8/_torch_fast.py). With torch and no GPU: what it hands
the library (CPU tensors posing as device 0's, the C call replaced by a recorder) and what it leaves to
the general path. On a GPU: the same bits as the general path (tensors seen only through
__cuda_array_interface__), the same errors for what it does not take, tensors that require grad read by
the operator, and the stream it is given. bench/host_path.py times it."""
import ctypes

import pytest

import volt8
from test_gpu import ctx, load_case, routed_inputs, torch  # noqa: F401 (fixtures)

SHAPE = volt8.MoeShape(hidden=256, intermediate=64, num_experts=6, block_n=128, block_k=128, intermediate_offset=64)


@pytest.fixture
def recorded(monkeypatch):
    """(Experts on a CPU-only context posing as device 0, the calls its C function received, torch)."""
    torch = pytest.importorskip("torch", reason="no torch")
    monkeypatch.setattr(torch.Tensor, "get_device", lambda tensor: 0 if tensor.device.type == "cpu" else -2)
    fast = volt8._torch_fast
    state = fast._torch or fast._torch_state()
    monkeypatch.setattr(fast, "_torch", state[:4] + (lambda device: 900 + device,) + state[5:])  # "current stream"
    context = volt8.Context(device=None)
    context.device = 0
    experts = volt8.Experts(context, 0x5000, SHAPE, max_tokens=8, max_top_k=4)
    experts._finalizer.detach()  # 0x5000 is no handle of the library's
    calls = []

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(volt8._abi.MoeArgs), ctypes.c_void_p)
    def record(handle, args, stream):
        a = args.contents
        calls.append((handle, a.size, a.num_tokens, a.top_k, a.x, a.topk_ids, a.topk_weights, a.out, a.check_ids,
                      stream or 0))
        return 0

    experts._torch_forward.function = record
    yield experts, calls, torch
    experts._handle = None
    context.close()


def test_fast_path_hands_the_library_the_tensors(recorded):
    experts, calls, torch = recorded
    x = torch.zeros(3, SHAPE.hidden, dtype=torch.float16)
    ids = torch.zeros(3, 4, dtype=torch.int32)
    weights = torch.zeros(3, 4)
    out = torch.empty_like(x)
    assert experts.forward(x, ids, weights, out, 77, check_ids=True) is out
    assert calls[-1] == (0x5000, ctypes.sizeof(volt8._abi.MoeArgs), 3, 4, x.data_ptr(), ids.data_ptr(),
                         weights.data_ptr(), out.data_ptr(), 1, 77)
    made = experts.forward(x[:2], ids[:2], weights[:2], stream=5)
    assert made.shape == (2, SHAPE.hidden) and made.dtype == torch.float16
    assert calls[-1][2:4] == (2, 4) and calls[-1][7] == made.data_ptr() and calls[-1][8:] == (0, 5)
    experts.forward(x, ids, weights, out)
    assert calls[-1][-1] == 900  # torch's current stream on device 0
    side = type("Stream", (), {"cuda_stream": 123})()  # a torch.cuda.Stream's raw handle
    experts.forward(x, ids, weights, out, side)
    assert calls[-1][-1] == 123
    for bad in (dict(x=x.float()), dict(ids=ids.long()), dict(weights=weights.half()), dict(x=x.t().contiguous().t()),
                dict(x=torch.zeros(3, 128, dtype=torch.float16)), dict(ids=ids[:, :3]),
                dict(x=x.requires_grad_(False).float().requires_grad_().half()), dict(out=out[:, :8])):
        args = dict(dict(x=x, ids=ids, weights=weights, out=out), **bad)
        count = len(calls)
        with pytest.raises(volt8.InvalidArgumentError):  # the general path: CPU tensors are not device arrays
            experts.forward(args["x"], args["ids"], args["weights"], args["out"], 5)
        assert len(calls) == count, bad


def test_a_refusal_of_the_library_is_named_by_the_general_checks(recorded):
    experts, calls, torch = recorded
    experts._torch_forward.function = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                                       ctypes.c_void_p)(lambda *args: 1)  # INVALID_ARGUMENT
    x = torch.zeros(9, SHAPE.hidden, dtype=torch.float16)  # 9 tokens: more than max_tokens 8
    with pytest.raises(volt8.InvalidArgumentError, match=r"x: needs a CUDA device array"):
        experts.forward(x, torch.zeros(9, 4, dtype=torch.int32), torch.zeros(9, 4), stream=5)


class InterfaceOnly:
    """A torch tensor seen only through __cuda_array_interface__ (the general path)."""

    def __init__(self, tensor):
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


@pytest.fixture
def experts(ctx, checkpoints):
    loaded, _ = load_case(ctx, checkpoints, "modelopt_mixed_indexed", 4, 1, {}, max_tokens=16, max_top_k=4)
    yield loaded
    loaded.close()


@pytest.mark.gpu
def test_fast_path_gives_the_general_paths_bits(torch, experts):
    stream = torch.cuda.current_stream()
    for tokens in (1, 5, 16):
        x, ids, weights = routed_inputs(torch, experts.shape, tokens, 4, seed=tokens)
        general = torch.empty_like(x)
        experts.forward(InterfaceOnly(x), InterfaceOnly(ids), InterfaceOnly(weights), InterfaceOnly(general),
                        stream.cuda_stream)
        fast = experts.forward(x, ids, weights)
        given = torch.empty_like(x)
        assert experts.forward(x, ids, weights, given, stream.cuda_stream) is given
        torch.cuda.synchronize()
        assert torch.equal(fast, general) and torch.equal(given, general), f"M={tokens}"


@pytest.mark.gpu
def test_what_the_fast_path_does_not_take_fails_as_before(torch, experts):
    x, ids, weights = routed_inputs(torch, experts.shape, 4, 4, seed=3)
    hidden = experts.shape.hidden
    flat = torch.empty(4 * hidden + 8, dtype=torch.float16, device="cuda")
    cases = [
        (dict(x=flat[2:2 + 4 * hidden].view(4, hidden)), r"x: data at .* is not 16-byte aligned"),  # the library's check
        (dict(x=torch.empty(20, hidden, dtype=torch.float16, device="cuda")), r"x: 20 tokens, outside 1\.\.16"),
        (dict(ids=torch.zeros(4, 5, dtype=torch.int32, device="cuda"),
              weights=torch.zeros(4, 5, device="cuda")), r"topk_ids: top_k 5 outside 1\.\.4"),
        (dict(x=x.float().requires_grad_().half()), r"x: __cuda_array_interface__ is not available"),
        (dict(ids=ids.long()), r"topk_ids: dtype is int64, needs int32"),
        (dict(x=torch.empty(hidden, 4, dtype=torch.float16, device="cuda").t()), r"x: is not C-contiguous"),
    ]
    for change, message in cases:
        args = dict(dict(x=x, ids=ids, weights=weights), **change)
        with pytest.raises(volt8.InvalidArgumentError, match=message):
            experts.forward(args["x"], args["ids"], args["weights"])
    out = torch.empty(4, hidden, dtype=torch.float16, device="cuda")
    with pytest.raises(volt8.InvalidArgumentError, match=r"out: has shape \[4, 8\]"):
        experts.forward(x, ids, weights, torch.empty(4, 8, dtype=torch.float16, device="cuda"))
    experts.close()
    with pytest.raises(volt8.InvalidArgumentError, match="the volt8.Experts are closed"):
        experts.forward(x, ids, weights)


@pytest.mark.gpu
def test_operator_reads_tensors_that_require_grad(torch, experts):
    import volt8.torch
    key = volt8.torch.register(experts)
    x, ids, weights = routed_inputs(torch, experts.shape, 6, 4, seed=4)
    expected = experts.forward(x, ids, weights)
    got = torch.ops.volt8.moe_forward(x.float().requires_grad_().half(), ids, weights.clone().requires_grad_(), key)
    torch.cuda.synchronize()
    assert torch.equal(got, expected)


@pytest.mark.gpu
def test_forward_runs_on_the_stream_given(torch, experts):
    x, ids, weights = routed_inputs(torch, experts.shape, 8, 4, seed=5)
    expected = experts.forward(x, ids, weights)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    out = torch.empty_like(x)
    torch.cuda._sleep(50_000_000)  # the current stream is busy for a while; the side stream is not held back
    experts.forward(x, ids, weights, out, side)
    side.synchronize()
    assert torch.equal(out, expected)
    with torch.cuda.stream(side):  # and None: torch's current stream, here the side one
        again = experts.forward(x, ids, weights)
    side.synchronize()
    assert torch.equal(again, expected)
    torch.cuda.synchronize()
