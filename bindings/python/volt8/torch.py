"""volt8 as torch operators: the MoE forward and the rejection sampler, registered with torch.library
(namespace volt8), so torch.compile(fullgraph=True) traces through them and CUDA graphs capture them.

    torch.ops.volt8.moe_forward(x, topk_ids, topk_weights, experts_key) -> out   (x float16 or bfloat16,
        topk_ids int32 or int64, topk_weights float32, bfloat16 or float16, M >= 0; out in x's dtype)
    torch.ops.volt8.rejection_sample(target_probs, draft_ids, num_draft, draft_probs, greedy,
                                     seed, offset, ctx_key) -> (out_ids, num_accepted)

A custom operator takes tensors and plain values only, so a loaded volt8.Experts (or a volt8.Context)
is named by an int key: register(obj) returns it, the same key for the same object, and the
operators look the object up while it lives (the caller keeps it alive). MoEExperts registers its
experts itself. Both operators launch on torch.cuda.current_stream() and never synchronise; each has
a fake implementation, so tracing needs no GPU. Nothing compiles during a CUDA graph capture: prepare
first (Experts.prepare with every token count the graphs use, Context.prepare_sampler). The operators
are inference-only (no gradient flows through them; moe_forward reads inputs that require grad, such
as a router's weights, as they are): torch.compile a module that calls them under torch.no_grad() or
torch.inference_mode() when its inputs require grad, as engines do. An eager moe_forward goes from
torch's dispatcher straight to its CUDA kernel and the forward's torch fast path (volt8/_torch_fast.py);
bench/host_path.py times it.

Importing volt8 never imports torch; this module is imported only on request.
"""
import itertools
import threading
import weakref
from typing import Optional, Tuple

try:
    import torch
except ImportError as error:
    raise ImportError(f"volt8.torch needs PyTorch, which is not installed ({error}): pip install torch") from error

from .context import Context
from .errors import CaptureError, InvalidArgumentError
from .experts import Experts
from .sampler import rejection_sample as _rejection_sample

_lock = threading.Lock()
_objects = weakref.WeakValueDictionary()  # key -> Experts or Context
_keys = weakref.WeakKeyDictionary()  # Experts or Context -> key
_next_key = itertools.count(1)


def register(obj):
    """The int key that names `obj` (a volt8.Experts or volt8.Context) in volt8's torch operators. The
    registry holds the object weakly: the key works while the caller keeps the object alive."""
    if not isinstance(obj, (Experts, Context)):
        raise InvalidArgumentError(f"register: {type(obj).__name__} is neither a volt8.Experts nor a volt8.Context")
    with _lock:
        key = _keys.get(obj)
        if key is None:
            key = next(_next_key)
            _keys[obj] = key
            _objects[key] = obj
        return key


def lookup(key, kind):
    """The object of class `kind` registered under `key`."""
    obj = _objects.get(key)
    if obj is None:
        raise InvalidArgumentError(f"key {key}: no live {kind.__name__} is registered under it "
                                   f"(volt8.torch.register gives keys; keep the object alive while ops use it)")
    if not isinstance(obj, kind):
        raise InvalidArgumentError(f"key {key}: names a volt8.{type(obj).__name__}, "
                                   f"the operator needs a volt8.{kind.__name__}")
    return obj


# The MoE operators are defined through torch.library.Library rather than torch.library.custom_op: an
# eager call then goes from torch's dispatcher straight to the CUDA kernel, without custom_op's Python
# layers around it (its autograd and redispatch wrappers, the aliasing check), which cost more than the
# rest of the call at M = 1. Having no autograd kernel, they pass tensors that require grad through
# torch's fallback: backward through them gives no gradient (torch warns) instead of raising.
_library = torch.library.Library("volt8", "FRAGMENT")


# What the MoE operators take, as engines' routers give it; converted once inside the operator to what
# the kernels read (float16, int32, float32). Both operators, moe_forward and the vLLM plugin's mtp_moe,
# check and convert through check_dtypes and forward_converted.
X_DTYPES = (torch.float16, torch.bfloat16)
ID_DTYPES = (torch.int32, torch.int64)
WEIGHT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _names(dtypes):
    return ", ".join(str(dtype).replace("torch.", "") for dtype in dtypes[:-1]) + " or " + str(dtypes[-1]).replace(
        "torch.", "")


def check_dtypes(x, topk_ids, topk_weights, operator):
    """InvalidArgumentError naming the tensor and `operator` ("volt8::moe_forward") unless x is float16 or
    bfloat16, topk_ids int32 or int64 and topk_weights float32, bfloat16 or float16."""
    for tensor, name, allowed in ((x, "x", X_DTYPES), (topk_ids, "topk_ids", ID_DTYPES),
                                  (topk_weights, "topk_weights", WEIGHT_DTYPES)):
        if tensor.dtype not in allowed:
            raise InvalidArgumentError(f"{name}: dtype {str(tensor.dtype).replace('torch.', '')}; {operator} takes "
                                       f"{_names(allowed)}")


def forward_converted(experts, x, topk_ids, topk_weights, operator, prepare_hint):
    """The MoE forward of both operators: dtypes checked (check_dtypes), then x as float16, the ids as int32
    and the weights as float32, each converted once and only when it is not so already; a batch of more
    tokens than the experts' max_tokens runs as several forwards, 0 tokens as none (an empty output).
    Returns a new tensor of x's dtype [M, hidden], computed on torch's current stream. A CaptureError gets
    prepare_hint(token count) appended (what to prepare before the capture)."""
    check_dtypes(x, topk_ids, topk_weights, operator)
    tokens = x.shape[0] if x.dim() == 2 else -1
    if tokens == 0:
        if x.shape[1] != experts.shape.hidden or topk_ids.dim() != 2 or topk_ids.shape[0] != 0 or \
                tuple(topk_weights.shape) != tuple(topk_ids.shape):
            raise InvalidArgumentError(f"{operator}: 0 tokens of x {list(x.shape)}, topk_ids {list(topk_ids.shape)}, "
                                       f"topk_weights {list(topk_weights.shape)}: x needs [0, {experts.shape.hidden}] "
                                       f"and the routing [0, top_k] each")
        return x.new_empty(x.shape)
    try:
        fast = experts._torch_forward
        # the kernels' own dtypes in one piece: straight to the fast path, which allocates the output
        if (fast is not None and x.dtype is torch.float16 and topk_ids.dtype is torch.int32
                and topk_weights.dtype is torch.float32 and 0 < tokens <= experts.max_tokens):
            out = fast(experts, x, topk_ids, topk_weights, None, None, False, True)
            if out is not None:
                return out
        # tensors that require grad (a router's weights) are only read
        x16 = x.detach().to(torch.float16).contiguous()
        ids = topk_ids.detach().to(torch.int32).contiguous()
        weights = topk_weights.detach().to(torch.float32).contiguous()
        out = torch.empty(x16.shape, dtype=torch.float16, device=x16.device)
        step = max(1, experts.max_tokens)
        for start in range(0, max(tokens, 1), step):
            end = min(tokens, start + step) if tokens > 0 else None
            piece = slice(start, end)
            if fast is None or fast(experts, x16[piece], ids[piece], weights[piece], out[piece], None, False,
                                    True) is None:
                # what the fast path does not take, the general one checks and names
                experts.forward(x16[piece], ids[piece], weights[piece], out[piece],
                                torch.cuda.current_stream(x16.device) if x16.is_cuda else None)
    except CaptureError as error:
        raise CaptureError(f"{error.message}; {prepare_hint(min(tokens, experts.max_tokens))}", error.status,
                           error.function) from None
    return out if x.dtype == torch.float16 else out.to(x.dtype)


def _define_moe_operator(name, cuda_kernel):
    """Defines volt8::name(Tensor x, Tensor topk_ids, Tensor topk_weights, SymInt experts_key) -> Tensor, an
    operator over the experts registered under experts_key: cuda_kernel computes it, CPU tensors are
    refused, and its fake implementation (for tracing) checks x is 2-D of X_DTYPES, topk_ids [M, top_k] of
    ID_DTYPES and topk_weights of its shape and of WEIGHT_DTYPES, and gives a new tensor like x. Returns
    the operator (torch.ops.volt8.name.default)."""

    def cpu_kernel(x, topk_ids, topk_weights, experts_key):
        raise InvalidArgumentError(f"x: volt8::{name} runs on CUDA tensors, got CPU ones")

    def fake(x, topk_ids, topk_weights, experts_key):
        torch._check(x.dim() == 2 and x.dtype in X_DTYPES,
                     lambda: f"x: needs {_names(X_DTYPES)} [M, hidden], got {x.dtype} {list(x.shape)}")
        torch._check(topk_ids.dim() == 2 and topk_ids.shape[0] == x.shape[0],
                     lambda: f"topk_ids: has shape {list(topk_ids.shape)}, needs [{x.shape[0]}, top_k]")
        torch._check(topk_ids.dtype in ID_DTYPES, lambda: f"topk_ids: needs {_names(ID_DTYPES)}, got {topk_ids.dtype}")
        torch._check(topk_weights.dim() == 2 and topk_weights.shape[0] == topk_ids.shape[0]
                     and topk_weights.shape[1] == topk_ids.shape[1],
                     lambda: f"topk_weights: has shape {list(topk_weights.shape)}, needs {list(topk_ids.shape)}")
        torch._check(topk_weights.dtype in WEIGHT_DTYPES,
                     lambda: f"topk_weights: needs {_names(WEIGHT_DTYPES)}, got {topk_weights.dtype}")
        return x.new_empty(x.shape)

    _library.define(f"{name}(Tensor x, Tensor topk_ids, Tensor topk_weights, SymInt experts_key) -> Tensor")
    _library.impl(name, cuda_kernel, "CUDA")
    _library.impl(name, cpu_kernel, "CPU")
    torch.library.register_fake(f"volt8::{name}", fake, lib=_library)
    return getattr(torch.ops.volt8, name).default


def _moe_forward_prepare_hint(tokens):
    return (f"from torch: experts.prepare([{tokens}]) (or MoEExperts.prepare) before the capture, or before the "
            f"first call of a torch.compile mode that captures CUDA graphs")


def _moe_forward_cuda(x, topk_ids, topk_weights, experts_key):
    experts = _objects.get(experts_key)
    if type(experts) is not Experts:
        experts = lookup(experts_key, Experts)
    return forward_converted(experts, x, topk_ids, topk_weights, "volt8::moe_forward", _moe_forward_prepare_hint)


# Experts.forward as an operator: x float16 or bfloat16 [M, hidden] (M >= 0), topk_ids int32 or int64
# [M, top_k], topk_weights float32, bfloat16 or float16 [M, top_k] -> a new [M, hidden] of x's dtype, on
# torch's current stream. experts_key: register(experts).
moe_forward = _define_moe_operator("moe_forward", _moe_forward_cuda)


@torch.library.custom_op("volt8::rejection_sample", mutates_args=(), device_types="cuda")
def rejection_sample(target_probs: torch.Tensor, draft_ids: Optional[torch.Tensor], num_draft: Optional[torch.Tensor],
                     draft_probs: Optional[torch.Tensor], greedy: Optional[torch.Tensor], seed: int, offset: int,
                     ctx_key: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """volt8.rejection_sample as an operator: returns new (out_ids int32 [B, K+1], num_accepted int32 [B]).
    ctx_key: register(ctx) of the Context on the tensors' device (CPU tensors run the host sampler and
    ignore it). seed, offset: 0 .. 2^63 - 1 (torch ints are signed). An invalid request is flagged by
    a row of -1 in out_ids, on either device."""
    ctx = lookup(ctx_key, Context)
    detached = lambda tensor: None if tensor is None else tensor.detach()
    target_probs, draft_ids, num_draft, draft_probs, greedy = map(detached, (target_probs, draft_ids, num_draft,
                                                                            draft_probs, greedy))
    stream = torch.cuda.current_stream(target_probs.device)
    try:
        result = _rejection_sample(target_probs, draft_ids, num_draft, draft_probs, greedy=greedy, seed=seed,
                                   offset=offset, ctx=ctx, stream=stream)
    except CaptureError as error:
        raise CaptureError(f"{error.message}; from torch: ctx.prepare_sampler() before the capture", error.status,
                           error.function) from None
    return result.out_ids, result.num_accepted


@rejection_sample.register_kernel("cpu")
def _rejection_sample_cpu(target_probs, draft_ids, num_draft, draft_probs, greedy, seed, offset, ctx_key):
    host = lambda tensor: None if tensor is None else tensor.detach().numpy()
    result = _rejection_sample(host(target_probs), host(draft_ids), host(num_draft), host(draft_probs),
                               greedy=host(greedy), seed=seed, offset=offset, strict=False)
    return torch.from_numpy(result.out_ids), torch.from_numpy(result.num_accepted)


@rejection_sample.register_fake
def _rejection_sample_fake(target_probs, draft_ids, num_draft, draft_probs, greedy, seed, offset, ctx_key):
    torch._check(target_probs.dim() == 3, lambda: f"target_probs: has {target_probs.dim()} dimensions, needs 3")
    batch, rows = target_probs.shape[0], target_probs.shape[1]
    return (target_probs.new_empty((batch, rows), dtype=torch.int32),
            target_probs.new_empty((batch,), dtype=torch.int32))


class MoEExperts(torch.nn.Module):
    """A loaded volt8.Experts as a module: forward(x, topk_ids, topk_weights) calls volt8::moe_forward.
    The module owns the experts (close() frees them); prepare() before capturing it in a CUDA graph."""

    def __init__(self, experts):
        super().__init__()
        if not isinstance(experts, Experts):
            raise InvalidArgumentError(f"experts: {type(experts).__name__} is not a volt8.Experts")
        self.experts = experts
        self.experts_key = register(experts)

    @classmethod
    def load(cls, ctx, checkpoint_dir, **options):
        """Experts.load(ctx, checkpoint_dir, **options), wrapped."""
        return cls(Experts.load(ctx, checkpoint_dir, **options))

    def prepare(self, token_counts):
        """Experts.prepare: compiles and sizes everything forwards of these token counts need. Not during
        a capture, where compiling and allocating would break it."""
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise CaptureError("MoEExperts.prepare: the current stream is capturing a CUDA graph; prepare "
                               "before the capture begins")
        self.experts.prepare(token_counts)

    def forward(self, x, topk_ids, topk_weights):
        return moe_forward(x, topk_ids, topk_weights, self.experts_key)

    def close(self):
        self.experts.close()

    def extra_repr(self):
        return f"{self.experts!r}, key={self.experts_key}"
