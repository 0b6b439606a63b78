"""plan(), load_host_checkpoint() and the host reference on the fixture checkpoints; the library's
own error statuses and messages for every broken checkpoint the fixtures hold."""
import os

import numpy as np
import pytest

import volt8
import moe_numpy
from checkpoint_cases import manifest_options, read_expected
from volt8.errors import ERROR_CLASSES


def workspace_bytes(shape, max_tokens, max_top_k):
    """The forward workspace of runtime/moe/kernels/moe_layout.h: regions at 256-byte boundaries."""
    pairs = max_tokens * min(max_top_k, shape.num_experts)
    launches = -(-pairs // 65535)
    regions = (pairs * 4, pairs * 16, pairs * 16, (launches + 1) * 16, pairs * shape.intermediate * 2,
               pairs * shape.hidden * 4, max_tokens * -(-shape.hidden // 32) * 4, (pairs + 1) * 4)
    return sum(-(-region // 256) * 256 for region in regions)


def test_plan_of_every_valid_checkpoint(checkpoints):
    folder, manifest = checkpoints
    for name, case in manifest["valid"].items():
        tp = max(case["tps"]["128"])
        report = volt8.plan(os.path.join(folder, case["dir"]), tp, **manifest_options(folder, case["options"]))
        assert (report.route, report.hidden, report.intermediate, report.num_experts, report.tp_size) == (
            case["route"], case["hidden"], case["intermediate"], case["experts"], tp), name
        assert report.tensor_prefix == case["prefix"] and report.scale_dtype == case["scale_dtype"], name
        assert (report.block_n, report.block_k) == (128, 128)
        assert [rank.rank for rank in report.ranks] == list(range(tp))
        for rank in report.ranks:
            shape = rank.shape
            width = case["intermediate"] // tp
            assert (shape.hidden, shape.intermediate, shape.num_experts) == (case["hidden"], width, case["experts"])
            expected_offset = rank.rank * width % 128 if case["route"] == "native" else 0
            assert shape.intermediate_offset == expected_offset, (name, rank.rank)
            memory = rank.memory
            assert memory.weight_bytes == 3 * shape.num_experts * shape.hidden * shape.intermediate
            assert memory.fp16_bytes == 2 * memory.weight_bytes
            scale_elements = sum(int(np.prod(dims[1:])) for key, dims in shape.layout().items() if key[0] == "s")
            assert memory.scale_bytes == 2 * shape.num_experts * scale_elements
            assert memory.weight_bytes + memory.scale_bytes <= memory.resident_bytes < memory.padded_bytes + 4096
            assert memory.workspace_bytes == workspace_bytes(shape, 64, 16), (name, rank.rank)


def test_plan_sizes_the_workspace_for_max_tokens(checkpoints):
    folder, _ = checkpoints
    path = os.path.join(folder, "modelopt_mixed_indexed")
    report = volt8.plan(path, 2, max_tokens=32768, max_top_k=16)
    assert (report.max_tokens, report.max_top_k) == (32768, 16)
    for rank in report.ranks:
        assert rank.memory.workspace_bytes == workspace_bytes(rank.shape, 32768, 16) > 2 ** 28
    with pytest.raises(volt8.InvalidArgumentError, match=r"max_tokens 268435456 x max_top_k 6 = 1610612736 routed "
                                                         r"pairs, more than the limit of 1073741824"):
        volt8.plan(path, 1, max_tokens=1 << 28)
    with pytest.raises(volt8.InvalidArgumentError, match="max_tokens"):
        volt8.plan(path, 1, max_tokens=0)
    host = volt8.load_host_checkpoint(path, tp_size=2, tp_rank=0)
    assert host.report.workspace_bytes == 0


def test_online_route_plan_and_conversion_error(checkpoints):
    folder, manifest = checkpoints
    case = manifest["valid"]["bf16_fused"]
    path = os.path.join(folder, case["dir"])
    report = volt8.plan(path, 4, mtp_expert_quantization="fp8", online_block_n=1)
    assert report.route == "online" and report.block_n == 1 and report.scale_dtype == ""
    assert report.quant_format.startswith("unquantized")
    host = volt8.load_host_checkpoint(path, tp_size=4, tp_rank=2, mtp_expert_quantization="fp8", online_block_n=1)
    assert host.report.route == "online" and host.shape.block_n == 1 and host.shape.intermediate_offset == 0
    assert 0 < host.report.online_relative_l2 < 0.1 and host.report.online_max_abs_error > 0
    expected = read_expected(folder, "bf16_fused", "bn1_tp4_rank2", host.shape)
    for key, array in host.arrays().items():
        np.testing.assert_array_equal(array, expected[key], err_msg=key)


def test_host_checkpoint_matches_the_fixture_arrays(checkpoints):
    folder, manifest = checkpoints
    for name, tp, rank in (("modelopt_mixed_indexed", 4, 1), ("fp8_runtime_names", 8, 3), ("separate_draft", 4, 2)):
        case = manifest["valid"][name]
        host = volt8.load_host_checkpoint(os.path.join(folder, case["dir"]), tp_size=tp, tp_rank=rank,
                                          **manifest_options(folder, case["options"]))
        assert host.report.route == "native" and host.report.num_experts == case["experts"]
        expected = read_expected(folder, name, f"tp{tp}_rank{rank}", host.shape)
        for key, array in host.arrays().items():
            assert not array.flags.writeable
            np.testing.assert_array_equal(array, expected[key], err_msg=f"{name} tp{tp} rank{rank} {key}")


def test_host_arrays_outlive_their_checkpoint_object(checkpoints):
    folder, manifest = checkpoints
    host = volt8.load_host_checkpoint(os.path.join(folder, "modelopt_mixed_indexed"), tp_size=2, tp_rank=1)
    w2, shape = host.w2, host.shape
    del host
    assert w2.shape == shape.layout()["w2"] and int(w2.astype(np.int64).sum()) > 0


def test_reference_forward_against_numpy(checkpoints):
    folder, _ = checkpoints
    host = volt8.load_host_checkpoint(os.path.join(folder, "modelopt_mixed_indexed"), tp_size=4, tp_rank=1)
    shape = host.shape
    rng = np.random.default_rng(3)
    tokens, top_k = 5, 2
    x = rng.normal(0, 1, size=(tokens, shape.hidden)).astype(np.float16)
    ids = np.stack([rng.choice(shape.num_experts, top_k, replace=False) for _ in range(tokens)]).astype(np.int32)
    ids[4, 1] = shape.num_experts  # out of range: contributes nothing
    weights = rng.random((tokens, top_k)).astype(np.float32)
    result = volt8.reference_moe_forward(host, x, ids, weights)
    w13, w2 = moe_numpy.dequantize(shape, host.w13, host.s13, host.w2, host.s2)
    expected = moe_numpy.moe_forward(shape, w13, w2, x, ids, weights)
    assert moe_numpy.relative_l2(expected, result) < 1e-6
    assert volt8.relative_l2(expected, result) == pytest.approx(moe_numpy.relative_l2(expected, result), abs=1e-12)
    assert volt8.relative_l2(expected, result.astype(np.float16)) < 1e-3
    assert volt8.relative_l2(np.zeros(4), np.zeros(4)) == 0.0


def test_expert_range_splits_like_plan():
    assert [volt8.expert_range(6, 4, rank) for rank in range(4)] == [(0, 2), (2, 2), (4, 1), (5, 1)]
    assert [volt8.expert_range(8, 2, rank) for rank in range(2)] == [(0, 4), (4, 4)]
    with pytest.raises(volt8.InvalidArgumentError, match="ep_size 7 over 6 experts"):
        volt8.expert_range(6, 7, 0)


@pytest.mark.parametrize("ep_size, tp_size", [(4, 1), (2, 2), (3, 4)])
def test_expert_ranks_sum_to_the_whole_layer(checkpoints, ep_size, tp_size):
    """Each EP x TP rank holds its experts' bytes of its TP slice; the reference forwards of all ranks, given
    global ids (two of them bad), sum to the whole layer's."""
    folder, _ = checkpoints
    path = os.path.join(folder, "modelopt_mixed_indexed")
    whole = volt8.load_host_checkpoint(path)
    experts = whole.shape.num_experts
    rng = np.random.default_rng(11)
    tokens, top_k = 6, 3
    x = rng.normal(0, 1, size=(tokens, whole.shape.hidden)).astype(np.float16)
    ids = np.stack([rng.choice(experts, top_k, replace=False) for _ in range(tokens)]).astype(np.int32)
    ids[2, 0], ids[5, 2] = experts, -3
    weights = rng.random((tokens, top_k)).astype(np.float32)
    expected = volt8.reference_moe_forward(whole, x, ids, weights)
    summed = np.zeros_like(expected)
    for tp_rank in range(tp_size):
        tp_slice = volt8.load_host_checkpoint(path, tp_size=tp_size, tp_rank=tp_rank)
        for ep_rank in range(ep_size):
            start, count = volt8.expert_range(experts, ep_size, ep_rank)
            rank = volt8.load_host_checkpoint(path, tp_size=tp_size, tp_rank=tp_rank, expert_start=start,
                                              expert_count=count)
            assert (rank.shape.num_experts, rank.shape.expert_start, rank.shape.model_experts) == (count, start, experts)
            for name, array in rank.arrays().items():
                np.testing.assert_array_equal(array, tp_slice.arrays()[name][start:start + count], err_msg=name)
            summed += volt8.reference_moe_forward(rank, x, ids, weights)
    assert volt8.relative_l2(expected, summed) < 1e-12


@pytest.mark.parametrize("start, count, named", [(-1, 2, "expert_start: -1"), (0, -3, "expert_count: -3"),
                                                 (5, 2, "expert_count is 2"), (6, 1, "expert_start is 6"),
                                                 (2, 0, "expert_start is 2")])
def test_bad_expert_ranges_are_refused(checkpoints, start, count, named):
    folder, _ = checkpoints
    with pytest.raises(volt8.InvalidArgumentError, match=named):
        volt8.load_host_checkpoint(os.path.join(folder, "modelopt_mixed_indexed"), expert_start=start,
                                   expert_count=count)


@pytest.fixture(scope="module")
def invalid(checkpoints):
    folder, manifest = checkpoints
    return folder, manifest["invalid"]


def test_every_broken_checkpoint_raises_its_status(invalid):
    """Each broken fixture: the Error subclass of the manifest's status, with its message fragments."""
    folder, cases = invalid
    assert len(cases) > 30
    for name, case in sorted(cases.items()):
        status = volt8.Status[case["status"][len("VOLT8_"):]]
        options = case["options"]
        kwargs = manifest_options(folder, options)
        with pytest.raises(volt8.Error) as caught:
            volt8.plan(os.path.join(folder, case["dir"]), options.get("tp", 1), **kwargs)
        error = caught.value
        assert type(error) is ERROR_CLASSES[status], f"{name}: {error!r}"
        assert error.status is status, name
        for fragment in case["contains"]:
            assert fragment in error.message, f"{name}: {fragment!r} not in {error.message!r}"


def test_load_argument_checks(checkpoints):
    folder, _ = checkpoints
    path = os.path.join(folder, "modelopt_mixed_indexed")
    with pytest.raises(volt8.InvalidArgumentError, match="tp_size"):
        volt8.plan(path, 0)
    with pytest.raises(volt8.InvalidArgumentError, match="mtp_expert_quantization"):
        volt8.plan(path, 1, mtp_expert_quantization=8)
    with pytest.raises(volt8.InvalidArgumentError, match="tp_rank 4 and tp_size 4"):
        volt8.load_host_checkpoint(path, tp_size=4, tp_rank=4)
    with pytest.raises(volt8.InvalidArgumentError, match="online_block_n"):
        volt8.plan(path, 1, online_block_n=64)


def test_nul_in_a_string_argument_is_refused(checkpoints):
    """C would read only up to the NUL: 'ck\\0/does/not/exist' planned ck, 'fp8\\0junk' was taken as fp8."""
    folder, manifest = checkpoints
    path = os.path.join(folder, "modelopt_mixed_indexed")
    online = os.path.join(folder, manifest["valid"]["bf16_fused"]["dir"])
    volt8.plan(path, 1)  # the folder itself is fine
    calls = [
        lambda: volt8.plan(path + "\0/does/not/exist", 1),
        lambda: volt8.plan(os.fsencode(path) + b"\0/x", 1),
        lambda: volt8.plan(path, 1, draft_checkpoint_dir=path + "\0/x"),
        lambda: volt8.plan(online, 1, mtp_expert_quantization="fp8\0junk"),
        lambda: volt8.load_host_checkpoint(path + "\0/x"),
        lambda: volt8.load_host_checkpoint(online, mtp_expert_quantization="fp8\0"),
    ]
    for index, call in enumerate(calls):
        with pytest.raises(volt8.InvalidArgumentError, match="NUL character") as caught:
            call()
        assert caught.value.function is None, index  # refused by the binding, before any library call
