"""The binding's own checks: dtype, shape, contiguity, alignment and device, before any call."""
import ctypes
import os

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
    with pytest.raises(volt8.InvalidArgumentError, match=r"token_counts\[1\]: 0 is not in 1..536870912 "
                       r"\(at most 1073741824 routed pairs at top_k 2\)"):
        experts.prepare([4, 0])
    with pytest.raises(volt8.InvalidArgumentError, match=r"536870913 is not in"):
        experts.prepare([536870913])
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


# ---- integers of any integer type (numpy's too), never bools or floats ----

NUMPY_INTEGERS = (np.int64, np.uint64, np.int32, np.uint16)


@pytest.mark.parametrize("kind", NUMPY_INTEGERS)
def test_numpy_integers_serve_as_sizes_and_seeds(kind):
    assert volt8.expert_range(kind(7), kind(2), kind(1)) == volt8.expert_range(7, 2, 1) == (4, 3)
    shape = volt8.MoeShape(hidden=kind(256), intermediate=kind(64), num_experts=kind(6), intermediate_offset=kind(64))
    assert shape == SHAPE and type(shape.hidden) is int, "kept as int, so the shape compares and hashes as one"
    options = volt8.checkpoint.load_options("/ckpt", tp_size=kind(4), tp_rank=kind(1), max_tokens=kind(8))
    assert (options.tp_size, options.tp_rank, options.max_tokens) == (4, 1, 8)
    experts = volt8.Experts(RecordingContext(), 0, SHAPE, max_tokens=8, max_top_k=2)
    experts.prepare(np.array([1, 8], dtype=kind))
    experts.prepare(kind(4))
    (_, (_, counts, count)), (_, (_, single, _)) = experts.ctx.calls[-2:]
    assert (list(counts), count, list(single)) == ([1, 8], 2, [4])
    rng = np.random.default_rng(3)
    target = rng.random((2, 2, 10)).astype(np.float32)
    target /= target.sum(-1, keepdims=True)
    ids = np.zeros((2, 1), dtype=np.int32)
    plain = volt8.rejection_sample(target, ids, seed=5, offset=9)
    typed = volt8.rejection_sample(target, ids, seed=kind(5), offset=kind(9))
    np.testing.assert_array_equal(plain.out_ids, typed.out_ids)
    assert volt8.context.device_ordinal(kind(0)) == 0


def test_a_seed_takes_every_unsigned_64_bit_value():
    target = np.full((1, 1, 4), 0.25, dtype=np.float32)
    volt8.rejection_sample(target, seed=np.uint64(2**64 - 1), offset=np.uint64(2**63))
    with pytest.raises(volt8.InvalidArgumentError, match=r"seed: 18446744073709551616 is not an unsigned 64-bit"):
        volt8.rejection_sample(target, seed=2**64)


@pytest.mark.parametrize("value, said", [
    (2.0, "2.0 is not an integer"), (np.float64(4), "is not an integer"), (True, "True is a bool, not"),
    (np.bool_(True), "is a bool, not"), ("4", "'4' is not an integer"), (np.uint64(2**63), "is not an integer in 1..")])
def test_bools_floats_and_values_out_of_range_are_refused(value, said):
    with pytest.raises(volt8.InvalidArgumentError, match="tp_size: .*" + said):
        volt8.checkpoint.load_options("/ckpt", tp_size=value)
    with pytest.raises(volt8.InvalidArgumentError, match="MoeShape.hidden: "):
        volt8.MoeShape(hidden=value)


# ---- MoeShape: a shape the library would refuse is refused when made, with the library's message ----

@pytest.mark.parametrize("fields, said", [
    ({"block_n": 0}, "block_n=0 must be 1 or 128"),
    ({"block_n": 64}, "block_n=64 must be 1 or 128"),
    ({"block_k": 0}, "block_k=0 must be 128"),
    ({"hidden": 0}, "hidden=0 must be a positive multiple of 16"),
    ({"intermediate": 24}, "intermediate=24 must be a positive multiple of 16"),
    ({"num_experts": 0}, r"num_experts=0 must be in \[1, 2048\]"),
    ({"intermediate_offset": 8}, "intermediate_offset=8 must be a non-negative multiple of 16"),
    ({"block_n": 1}, "intermediate_offset=32 must be 0 when block_n=1"),
    ({"expert_start": 2}, "expert_start=2 must be 0 when global_experts=0"),
    ({"num_experts": 4, "expert_start": 2, "global_experts": 5}, r"global_experts=5 must hold experts \[2, 6\)"),
    ({"hidden": 2**31}, "MoeShape.hidden: 2147483648 is not an integer in"),
])
def test_a_bad_shape_is_refused_naming_the_field(fields, said):
    with pytest.raises(ValueError, match=said) as caught:
        volt8.MoeShape(**fields)
    assert isinstance(caught.value, volt8.InvalidArgumentError)


def test_the_layout_of_every_accepted_block_shape():
    shape = volt8.MoeShape(block_n=1, intermediate_offset=0)
    assert shape.layout()["s13"] == (512, 2, 160, 20)
    assert volt8.MoeShape(num_experts=4, expert_start=2, global_experts=6).model_experts == 6


# ---- nvrtc_dirs: each folder of a list whole, a ':' in its name included ----

def run_isolated(code, tmp_path):
    """`code` in a fresh interpreter that finds NVRTC only where `code` says."""
    import subprocess
    import sys
    env = {key: value for key, value in os.environ.items()
           if key not in ("VOLT8_NVRTC_DIRS", "VOLT8_NVRTC", "CUDA_HOME", "CUDA_PATH")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.realpath(volt8.__file__)))
    env["VOLT8_LIBRARY"] = volt8.library_path()
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)


COMPILE_WITH = """
import volt8
ctx = volt8.Context(device=None, target_arch="sm_70", cache_disable=True, nvrtc_dirs=[{folder!r}])
name = next(name for name in ctx.variant_names() if name.startswith("gate_up.cc.bm1"))
print(name, ctx.compile_variant(name))
"""


def test_a_listed_folder_with_a_colon_is_searched_whole(tmp_path):
    folder = tmp_path / "co:lon"
    folder.mkdir()
    run = run_isolated(COMPILE_WITH.format(folder=str(folder)), tmp_path)
    if run.returncode == 0:
        pytest.skip("this host's system loader or toolkit has an NVRTC for compute_70")
    assert f"{folder}/libnvrtc.so.12 (options.nvrtc_dir_list): no such file" in run.stderr, run.stderr
    assert f"{tmp_path}/co/libnvrtc.so.12" not in run.stderr, "the folder was split at its ':'"


def test_nvrtc_in_a_folder_with_a_colon_compiles(tmp_path):
    from volt8 import _nvrtc
    wheel = [folder for folder in _nvrtc.wheel_folders() if os.path.exists(os.path.join(folder, "libnvrtc.so.12"))]
    if not wheel:
        pytest.skip("no pip-installed NVRTC 12 in this Python")
    folder = tmp_path / "co:lon"
    folder.mkdir()
    for name in os.listdir(wheel[0]):  # libnvrtc.so.12 and the builtins it loads from its own folder
        (folder / name).symlink_to(os.path.join(wheel[0], name))
    run = run_isolated(COMPILE_WITH.format(folder=str(folder)), tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("False"), run.stdout


@pytest.mark.parametrize("dirs, said", [(["/usr/lib", ""], r"nvrtc_dirs\[1\]: an empty path"),
                                        (["/usr/lib", 5], r"nvrtc_dirs\[1\]: 5 is not a path"),
                                        (5, "nvrtc_dirs: 5 is not a list of folders"),
                                        (["/x"] * 65, "65 folders, at most 64")])
def test_a_bad_folder_list_is_refused(dirs, said):
    with pytest.raises(volt8.InvalidArgumentError, match=said):
        volt8.Context(device=None, cache_disable=True, nvrtc_dirs=dirs)
