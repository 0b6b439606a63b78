"""Top-k from 1 to 16 through the binding: the host reference at both ends against numpy, at
Qwen3-Next's TP8 rank 1 (hidden 2048, I = 64 at offset 64) with 16 experts, and the default
workspace of a handle."""
import numpy as np
import pytest

import volt8
import moe_numpy
from fakes import RecordingContext

SHAPE = volt8.MoeShape(hidden=2048, intermediate=64, num_experts=16, block_n=128, block_k=128, intermediate_offset=64)


def random_experts(rng):
    layout = SHAPE.layout()
    codes = {name: rng.integers(0, 256, size=layout[name], dtype=np.uint8) for name in ("w13", "w2")}
    for array in codes.values():
        array[(array & 0x7F) == 0x7F] ^= 1  # no NaN codes
    # scale * 2^8 in [2^-6, 2^-3): normal FP16
    scales = {name: (2.0 ** rng.uniform(-6, -3, size=layout[name])).astype(np.float16).view(np.uint16)
              for name in ("s13", "s2")}
    return codes["w13"], scales["s13"], codes["w2"], scales["s2"]


@pytest.mark.parametrize("top_k", [1, 16])
def test_reference_at_top_k(top_k):
    rng = np.random.default_rng(24 + top_k)
    w13, s13, w2, s2 = random_experts(rng)
    tokens = 3
    x = rng.uniform(-1, 1, size=(tokens, SHAPE.hidden)).astype(np.float16)
    ids = np.stack([rng.permutation(SHAPE.num_experts)[:top_k] for _ in range(tokens)]).astype(np.int32)
    weights = rng.uniform(0.05, 1.0, size=(tokens, top_k)).astype(np.float32)
    result = volt8.reference_moe_forward((SHAPE, w13, s13, w2, s2), x, ids, weights)
    w13_values, w2_values = moe_numpy.dequantize(SHAPE, w13, s13, w2, s2)
    expected = moe_numpy.moe_forward(SHAPE, w13_values, w2_values, x, ids, weights)
    assert moe_numpy.relative_l2(expected, result) <= 1e-12


def test_default_workspace_serves_top_k_16():
    experts = volt8.Experts(RecordingContext(), 0, SHAPE, max_tokens=8, max_top_k=volt8._abi.LoadOptions().max_top_k)
    assert experts.max_top_k == 16
