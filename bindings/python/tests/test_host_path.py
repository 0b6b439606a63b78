"""The forward's fast path for torch tensors (volt8/_torch_fast.py) on a GPU: the same bits as the general
path (tensors seen only through __cuda_array_interface__), the same errors for what it does not take,
tensors that require grad read by the operator, and the stream it is given. bench/host_path.py times it."""
import pytest

import volt8
from test_gpu import ctx, load_case, routed_inputs, torch  # noqa: F401 (fixtures)

pytestmark = pytest.mark.gpu


class InterfaceOnly:
    """A torch tensor seen only through __cuda_array_interface__ (the general path)."""

    def __init__(self, tensor):
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


@pytest.fixture
def experts(ctx, checkpoints):
    loaded, _ = load_case(ctx, checkpoints, "modelopt_mixed_indexed", 4, 1, {}, max_tokens=16, max_top_k=4)
    yield loaded
    loaded.close()


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
        experts.forward(x, ids, weights, out[:, :8])
    experts.close()
    with pytest.raises(volt8.InvalidArgumentError, match="the volt8.Experts are closed"):
        experts.forward(x, ids, weights)


def test_operator_reads_tensors_that_require_grad(torch, experts):
    import volt8.torch
    key = volt8.torch.register(experts)
    x, ids, weights = routed_inputs(torch, experts.shape, 6, 4, seed=4)
    expected = experts.forward(x, ids, weights)
    got = torch.ops.volt8.moe_forward(x.float().requires_grad_().half(), ids, weights.clone().requires_grad_(), key)
    torch.cuda.synchronize()
    assert torch.equal(got, expected)


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
