"""The binding's own checks: dtype, shape, contiguity, alignment and device, before any call."""
import ctypes

import numpy as np
import pytest

import volt8
from volt8 import _arrays
from fakes import FakeDeviceArray, FakeTorchTensor, RecordingContext

SHAPE = volt8.MoeShape(hidden=256, intermediate=64, num_experts=6, block_n=128, block_k=128, intermediate_offset=64)


@pytest.fixture
def experts():
    return volt8.Experts(RecordingContext(), 0, SHAPE, max_tokens=8, max_top_k=2)


def forward_args(tokens=4, top_k=2, hidden=SHAPE.hidden):
    return dict(x=FakeDeviceArray((tokens, hidden), "<f2"), topk_ids=FakeDeviceArray((tokens, top_k), "<i4"),
                topk_weights=FakeDeviceArray((tokens, top_k), "<f4"), out=FakeDeviceArray((tokens, hidden), "<f2"))


def test_valid_forward_reaches_the_library(experts):
    args = forward_args()
    assert experts.forward(**args, stream=5) is args["out"]
    function, (handle, moe_args, stream) = experts.ctx.calls[-1]
    assert function == "volt8_moe_forward" and handle == 0 and stream == 5
    moe_args = ctypes.cast(moe_args, ctypes.POINTER(volt8._abi.MoeArgs)).contents
    assert (moe_args.num_tokens, moe_args.top_k, moe_args.check_ids) == (4, 2, 0)
    assert moe_args.x == args["x"].__cuda_array_interface__["data"][0]
    assert moe_args.out == args["out"].__cuda_array_interface__["data"][0]


def test_max_top_k_is_capped_by_the_experts():
    assert volt8.Experts(RecordingContext(), 0, SHAPE, max_tokens=8, max_top_k=10).max_top_k == SHAPE.num_experts


@pytest.mark.parametrize("change, message", [
    (dict(x=FakeDeviceArray((4, 256), "<f4")), "x: dtype is float32, needs float16"),
    (dict(x=FakeDeviceArray((4, 128), "<f2")), r"x: has shape \[4, 128\], needs \[\*, 256\]"),
    (dict(x=FakeDeviceArray((4, 16, 16), "<f2")), "x: has 3 dimensions"),
    (dict(x=FakeDeviceArray((9, 256), "<f2")), "x: 9 tokens, outside 1..8"),
    (dict(x=FakeDeviceArray((0, 256), "<f2")), "x: 0 tokens"),
    (dict(topk_ids=FakeDeviceArray((4, 2), "<i8")), "topk_ids: dtype is int64, needs int32"),
    (dict(topk_ids=FakeDeviceArray((4, 3), "<i4")), "top_k 3 outside 1..2"),
    (dict(topk_ids=FakeDeviceArray((3, 2), "<i4")), r"topk_ids: has shape \[3, 2\], needs \[4, 2\]"),
    (dict(topk_weights=FakeDeviceArray((4, 2), "<f2")), "topk_weights: dtype is float16, needs float32"),
    (dict(topk_weights=FakeDeviceArray((4, 1), "<f4")), r"topk_weights: has shape \[4, 1\]"),
    (dict(out=FakeDeviceArray((4, 255), "<f2")), r"out: has shape"),
    (dict(out=FakeDeviceArray((4, 256), "<f2", readonly=True)), "out: is read-only"),
    (dict(x=FakeDeviceArray((4, 256), "<f2", strides=(2, 512))), "x: is not C-contiguous"),
    (dict(x=FakeDeviceArray((4, 256), "<f2", pointer=0x7E0000000008)), "x: data at .* is not 16-byte aligned"),
    (dict(topk_ids=FakeDeviceArray((4, 2), "<i4", pointer=0x7E0000000002)), "not 4-byte aligned"),
    (dict(x=np.zeros((4, 256), np.float16)), "x: needs a CUDA device array .*got a CPU array"),
    (dict(out=[[0.0] * 256] * 4), "out: needs a CUDA device array .*got list"),
])
def test_forward_checks(experts, change, message):
    args = forward_args()
    args.update(change)
    with pytest.raises(volt8.InvalidArgumentError, match=message):
        experts.forward(**args)
    assert experts.ctx.calls == []


def test_padded_rows_are_contiguous_enough(experts):
    """Strides of extent-1 dimensions do not matter."""
    args = forward_args(tokens=1)
    args["x"] = FakeDeviceArray((1, 256), "<f2", strides=(9999, 2))
    experts.forward(**args)
    assert experts.ctx.calls[-1][0] == "volt8_moe_forward"


def test_device_mismatch_is_refused(experts):
    args = forward_args()
    args["x"] = FakeTorchTensor((4, 256), "<f2", device_index=1)
    with pytest.raises(volt8.InvalidArgumentError, match="x: is on CUDA device 1, the call runs on device 0"):
        experts.forward(**args)


def test_out_is_needed_without_a_framework(experts):
    args = forward_args()
    del args["out"]
    with pytest.raises(volt8.InvalidArgumentError, match="out: needed"):
        experts.forward(**args)


def test_check_ids_and_capture(experts):
    experts.forward(**forward_args(), check_ids=True)
    moe_args = ctypes.cast(experts.ctx.calls[-1][1][1], ctypes.POINTER(volt8._abi.MoeArgs)).contents
    assert moe_args.check_ids == 1
    experts.capture(**forward_args())
    function, args = experts.ctx.calls[-1]
    assert function == "volt8_graph_capture" and args[2] == 0


def test_prepare_checks_and_raises_max_tokens(experts):
    with pytest.raises(volt8.InvalidArgumentError, match=r"token_counts\[1\]: 0 is not in 1..32767"):
        experts.prepare([4, 0])
    with pytest.raises(volt8.InvalidArgumentError):
        experts.prepare([40000])
    assert experts.ctx.calls == []
    experts.prepare([1, 16])
    assert experts.ctx.calls[-1][0] == "volt8_experts_prepare" and experts.max_tokens == 16
    experts.prepare(2)
    assert experts.max_tokens == 16


class TorchLikeStream:
    cuda_stream = 0x1234


class CupyLikeStream:
    ptr = 0x5678


class ProtocolStream:
    def __cuda_stream__(self):
        return (0, 0x9ABC)


def test_streams():
    assert _arrays.stream_handle(None) == 0
    assert _arrays.stream_handle(0) == 0 and _arrays.stream_handle(0xABC) == 0xABC
    assert _arrays.stream_handle(ctypes.c_void_p(0x10)) == 0x10
    assert _arrays.stream_handle(ctypes.c_void_p()) == 0
    assert _arrays.stream_handle(TorchLikeStream()) == 0x1234
    assert _arrays.stream_handle(CupyLikeStream()) == 0x5678
    assert _arrays.stream_handle(ProtocolStream()) == 0x9ABC
    for bad in (-1, True, "stream", 1.5):
        with pytest.raises(volt8.InvalidArgumentError, match="stream"):
            _arrays.stream_handle(bad)


def test_host_experts_arrays_are_checked():
    shape = volt8.MoeShape(hidden=128, intermediate=16, num_experts=2, block_n=128, block_k=128, intermediate_offset=0)
    layout = shape.layout()
    assert layout == {"w13": (2, 32, 128), "s13": (2, 2, 1, 1), "w2": (2, 128, 16), "s2": (2, 1, 1)}
    arrays = {name: np.zeros(dims, np.uint8 if name[0] == "w" else np.uint16) for name, dims in layout.items()}
    x = np.zeros((1, 128), np.float16)
    ids, weights = np.zeros((1, 1), np.int32), np.ones((1, 1), np.float32)
    assert not volt8.reference_moe_forward((shape, *arrays.values()), x, ids, weights).any()
    bad = dict(arrays, w2=np.zeros((2, 16, 128), np.uint8))
    with pytest.raises(volt8.InvalidArgumentError, match=r"w2: has shape \[2, 16, 128\], needs \[2, 128, 16\]"):
        volt8.reference_moe_forward((shape, *bad.values()), x, ids, weights)
    bad = dict(arrays, s13=np.zeros(layout["s13"], np.float32))
    with pytest.raises(volt8.InvalidArgumentError, match="s13: dtype is float32"):
        volt8.reference_moe_forward((shape, *bad.values()), x, ids, weights)
    with pytest.raises(volt8.InvalidArgumentError, match="MoeShape"):
        volt8.reference_moe_forward(("shape", *arrays.values()), x, ids, weights)
    with pytest.raises(volt8.InvalidArgumentError, match=r"x: has shape \[1, 64\]"):
        volt8.reference_moe_forward((shape, *arrays.values()), np.zeros((1, 64), np.float16), ids, weights)
    arrays["s13"][:] = 0x7C00  # +inf scales: the library refuses them with a message
    arrays["w13"][:] = 0x38
    with pytest.raises(volt8.InvalidArgumentError, match="scale"):
        volt8.reference_moe_forward((shape, *arrays.values()), np.ones((1, 128), np.float16), ids, weights)


def test_nul_in_context_and_variant_strings_is_refused(experts):
    for keyword in ("cache_dir", "target_arch"):
        with pytest.raises(volt8.InvalidArgumentError, match=f"{keyword}: .* NUL character"):
            volt8.Context(device=None, **{keyword: "sm_70\0junk"})
    with volt8.Context(device=None, cache_disable=True) as ctx:
        with pytest.raises(volt8.InvalidArgumentError, match="name: .* NUL character"):
            ctx.compile_variant("gate_up\0junk")
    with pytest.raises(volt8.InvalidArgumentError, match="down: .* NUL character"):
        experts.set_variants(gate_up=None, down="down.x\0y")
    assert not experts.ctx.calls
