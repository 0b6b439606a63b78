"""rejection_sample: the speculative-decoding rejection sampler on host arrays or device tensors."""
import ctypes
from typing import Any, NamedTuple

from . import _abi
from ._arrays import (allocator_for, is_device_array, parse, require_device, require_shape, stream_handle)
from ._integers import integer
from ._library import check, load
from .errors import InvalidArgumentError, Status

MAX_VOCAB = 1 << 24
MAX_DRAFT = 65534


class RejectionResult(NamedTuple):
    """out_ids int32 [B, K+1]: accepted drafts, then one recovered or bonus token, then -1 (a row of -1:
    that request's input was invalid); num_accepted int32 [B]."""

    out_ids: Any
    num_accepted: Any


def _uint64(value, name):
    return integer(value, name, 0, (1 << 64) - 1, "an unsigned 64-bit integer")


def rejection_sample(target_probs, draft_ids=None, num_draft=None, draft_probs=None, *, greedy=None, seed=0, offset=0,
                     out_ids=None, num_accepted=None, ctx=None, stream=None, strict=True):
    """One verification step of B requests with up to K drafts each over a vocabulary of V tokens.

    target_probs float32 [B, K+1, V] (row K: the bonus position); draft_ids int32 [B, K] (may be None
    when K == 0); num_draft int32 [B] (None: K for every request); draft_probs float32 [B, K, V] or None
    (drafts deterministic); greedy bool/uint8 [B] or None. seed and offset key the counter-based RNG:
    the same inputs, seed and offset give the same tokens on the host and on the GPU; use a fresh
    offset (or seed) every step.

    Host arrays (numpy) run volt8_rejection_sample_host; outputs are allocated with numpy when left
    out. A request with invalid input gets an out_ids row of -1; strict=True then raises
    InvalidArgumentError (its .result holds the sampled batch). Device tensors (torch, CuPy) run
    volt8_rejection_sample on `ctx`'s device and `stream` (default: the tensors' framework's current
    stream); outputs are allocated with that framework when left out; invalid requests are flagged on
    the device only (out_ids[b, 0] == -1), whatever `strict` says. Returns a RejectionResult."""
    on_device = is_device_array(target_probs)
    if on_device and ctx is None:
        raise InvalidArgumentError("ctx: device tensors need the volt8.Context of their device")
    target = parse(target_probs, "target_probs", ("float32",), ndim=3, on_device=on_device)
    batch, rows, vocab = target.shape
    max_draft = rows - 1
    if rows < 1 or max_draft > MAX_DRAFT:
        raise InvalidArgumentError(f"target_probs: K+1 = {rows} rows per request, needs 1..{MAX_DRAFT + 1}")
    if not 1 <= vocab <= MAX_VOCAB:
        raise InvalidArgumentError(f"target_probs: vocabulary of {vocab}, needs 1..{MAX_VOCAB}")
    if batch >= 1 << 31:
        raise InvalidArgumentError(f"target_probs: batch of {batch} requests is too large")

    def optional(value, name, dtypes, shape, writable=False):
        if value is None:
            return None
        array = parse(value, name, dtypes, ndim=len(shape), on_device=on_device, writable=writable)
        require_shape(array, shape)
        return array

    if draft_ids is None and max_draft > 0:
        raise InvalidArgumentError(f"draft_ids: needed for K = {max_draft} drafts a request")
    drafts = optional(draft_ids, "draft_ids", ("int32",), (batch, max_draft))
    draft = optional(draft_probs, "draft_probs", ("float32",), (batch, max_draft, vocab))
    greedy_array = optional(greedy, "greedy", ("bool", "uint8"), (batch,))
    seed, offset = _uint64(seed, "seed"), _uint64(offset, "offset")
    inputs = [target, drafts, draft, greedy_array]
    if on_device:
        return _sample_on_device(ctx, stream, inputs, num_draft, out_ids, num_accepted, optional, seed, offset)
    return _sample_on_host(inputs, num_draft, out_ids, num_accepted, optional, seed, offset, strict)


def _args(inputs, num_draft, out_ids, num_accepted, seed, offset):
    target, drafts, draft, greedy = inputs
    batch, rows, vocab = target.shape
    pointer = lambda array: None if array is None else array.pointer
    return _abi.RejectionArgs(batch=batch, max_draft=rows - 1, num_draft=num_draft.pointer, draft_ids=pointer(drafts),
                              draft_probs=pointer(draft), target_probs=target.pointer, vocab=vocab,
                              greedy=pointer(greedy), seed=seed, offset=offset, out_ids=out_ids.pointer,
                              num_accepted=num_accepted.pointer)


def _sample_on_host(inputs, num_draft, out_ids, num_accepted, optional, seed, offset, strict):
    import numpy
    batch, rows = inputs[0].shape[:2]
    if num_draft is None:
        num_draft = numpy.full(batch, rows - 1, dtype=numpy.int32)
    if out_ids is None:
        out_ids = numpy.empty((batch, rows), dtype=numpy.int32)
    if num_accepted is None:
        num_accepted = numpy.empty(batch, dtype=numpy.int32)
    counts = optional(num_draft, "num_draft", ("int32",), (batch,))
    out = optional(out_ids, "out_ids", ("int32",), (batch, rows), writable=True)
    accepted = optional(num_accepted, "num_accepted", ("int32",), (batch,), writable=True)
    args = _args(inputs, counts, out, accepted, seed, offset)
    status = load().volt8_rejection_sample_host(ctypes.byref(args))
    result = RejectionResult(out_ids, num_accepted)
    if status == Status.ERR_INVALID_ARGUMENT and not strict:
        return result
    try:
        check(status, "volt8_rejection_sample_host")
    except InvalidArgumentError as error:
        error.result = result
        raise
    return result


def _sample_on_device(ctx, stream, inputs, num_draft, out_ids, num_accepted, optional, seed, offset):
    batch, rows = inputs[0].shape[:2]
    module = allocator_for(inputs)
    missing = [name for name, value in (("num_draft", num_draft), ("out_ids", out_ids), ("num_accepted", num_accepted))
               if value is None]
    if missing and module is None:
        raise InvalidArgumentError(
            f"{', '.join(missing)}: needed (the binding allocates only for torch and CuPy inputs)")
    if num_draft is None:  # filled on the framework's current stream
        num_draft = _new(module, inputs[0].obj, (batch,), rows - 1)
    if out_ids is None:
        out_ids = _new(module, inputs[0].obj, (batch, rows))
    if num_accepted is None:
        num_accepted = _new(module, inputs[0].obj, (batch,))
    counts = optional(num_draft, "num_draft", ("int32",), (batch,))
    out = optional(out_ids, "out_ids", ("int32",), (batch, rows), writable=True)
    accepted = optional(num_accepted, "num_accepted", ("int32",), (batch,), writable=True)
    arrays = inputs + [counts, out, accepted]
    require_device(arrays, ctx.device)
    args = _args(inputs, counts, out, accepted, seed, offset)
    handle = stream_handle(stream, arrays, ctx.device)
    ctx.call("volt8_rejection_sample", ctx.handle, ctypes.byref(args), handle)
    return RejectionResult(out_ids, num_accepted)


def _new(module, like, shape, fill=None):
    """An int32 device array of the inputs' framework, on their device; filled with `fill` unless None."""
    if module.__name__ == "torch":
        if fill is None:
            return module.empty(shape, dtype=module.int32, device=like.device)
        return module.full(shape, fill, dtype=module.int32, device=like.device)
    with like.device:
        return module.empty(shape, dtype=module.int32) if fill is None else module.full(shape, fill, dtype=module.int32)
