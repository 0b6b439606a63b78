"""The double-precision host reference of the MoE forward, and the relative L2 error it is judged by."""
import ctypes

from ._arrays import parse, require_shape
from ._library import check, load
from .checkpoint import experts_arrays, host_experts
from .errors import InvalidArgumentError


def reference_moe_forward(experts, x, topk_ids, topk_weights, *, ctx=None):
    """The forward in float64 on the host (the contract the GPU kernels are checked against).
    experts: a HostCheckpoint or (MoeShape, w13, s13, w2, s2); x float16 [M, H]; topk_ids int32 [M, K];
    topk_weights float32 [M, K]. Returns float64 [M, H]. Ids outside [0, E) contribute nothing."""
    import numpy
    shape, w13, s13, w2, s2 = experts_arrays(experts)
    struct, _ = host_experts(shape, w13, s13, w2, s2)
    x_array = parse(x, "x", ("float16", "uint16"), ndim=2, on_device=False)
    tokens = x_array.shape[0]
    require_shape(x_array, (None, shape.hidden))
    ids = parse(topk_ids, "topk_ids", ("int32",), ndim=2, on_device=False)
    top_k = ids.shape[1]
    require_shape(ids, (tokens, top_k))
    weights = parse(topk_weights, "topk_weights", ("float32",), ndim=2, on_device=False)
    require_shape(weights, (tokens, top_k))
    out = numpy.empty((tokens, shape.hidden), dtype=numpy.float64)
    c_shape = shape.to_c()
    ctx_handle = None if ctx is None else ctx.handle
    status = load().volt8_reference_moe_forward(ctx_handle, ctypes.byref(c_shape), ctypes.byref(struct),
                                                x_array.pointer, ids.pointer, weights.pointer, tokens, top_k,
                                                out.ctypes.data)
    check(status, "volt8_reference_moe_forward", ctx_handle)
    return out


def relative_l2(reference, result):
    """||result - reference|| / ||reference|| (volt8_relative_l2; the half variant when result is float16).
    NaN or infinity in either gives NaN; all-zero against all-zero gives 0, nonzero against it +inf."""
    reference_array = parse(reference, "reference", ("float64",), on_device=False)
    result_array = parse(result, "result", ("float64", "float16"), on_device=False)
    if result_array.size != reference_array.size:
        raise InvalidArgumentError(f"result: {result_array.size} elements, the reference has {reference_array.size}")
    error = ctypes.c_double()
    function = "volt8_relative_l2_half" if result_array.dtype == "float16" else "volt8_relative_l2"
    check(getattr(load(), function)(None, reference_array.pointer, result_array.pointer, reference_array.size,
                                    ctypes.byref(error)), function)
    return error.value
