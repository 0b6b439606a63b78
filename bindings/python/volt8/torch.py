"""volt8 as torch operators: the MoE forward and the rejection sampler, registered with torch.library
(namespace volt8), so torch.compile(fullgraph=True) traces through them and CUDA graphs capture them.

    torch.ops.volt8.moe_forward(x, topk_ids, topk_weights, experts_key) -> out
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


def _define_moe_operator(name, cuda_kernel, x_dtypes):
    """Defines volt8::name(Tensor x, Tensor topk_ids, Tensor topk_weights, SymInt experts_key) -> Tensor, an
    operator over the experts registered under experts_key: cuda_kernel computes it, CPU tensors are
    refused, and its fake implementation (for tracing) checks x is 2-D of one of x_dtypes and topk_ids
    [M, top_k], and gives a new tensor like x. Returns the operator (torch.ops.volt8.name.default)."""
    x_names = " or ".join(str(dtype).replace("torch.", "") for dtype in x_dtypes)

    def cpu_kernel(x, topk_ids, topk_weights, experts_key):
        raise InvalidArgumentError(f"x: volt8::{name} runs on CUDA tensors, got CPU ones")

    def fake(x, topk_ids, topk_weights, experts_key):
        torch._check(x.dim() == 2 and x.dtype in x_dtypes,
                     lambda: f"x: needs {x_names} [M, hidden], got {x.dtype} {list(x.shape)}")
        torch._check(topk_ids.dim() == 2 and topk_ids.shape[0] == x.shape[0],
                     lambda: f"topk_ids: has shape {list(topk_ids.shape)}, needs [{x.shape[0]}, top_k]")
        return x.new_empty(x.shape)

    _library.define(f"{name}(Tensor x, Tensor topk_ids, Tensor topk_weights, SymInt experts_key) -> Tensor")
    _library.impl(name, cuda_kernel, "CUDA")
    _library.impl(name, cpu_kernel, "CPU")
    torch.library.register_fake(f"volt8::{name}", fake, lib=_library)
    return getattr(torch.ops.volt8, name).default


def _moe_forward_cuda(x, topk_ids, topk_weights, experts_key):
    experts = _objects.get(experts_key)
    if type(experts) is not Experts:
        experts = lookup(experts_key, Experts)
    try:
        out = None
        if experts._torch_forward is not None:  # tensors that require grad (a router's weights) are only read
            out = experts._torch_forward(experts, x, topk_ids, topk_weights, None, None, False, True)
        if out is None:  # what the fast path does not take, the general one checks and names
            x, topk_ids, topk_weights = x.detach(), topk_ids.detach(), topk_weights.detach()
            out = x.new_empty(x.shape)
            experts.forward(x, topk_ids, topk_weights, out, torch.cuda.current_stream(x.device))
    except CaptureError as error:
        raise CaptureError(f"{error.message}; from torch: experts.prepare([{x.shape[0]}]) (or MoEExperts.prepare) "
                           f"before the capture, or before the first call of a torch.compile mode that captures "
                           f"CUDA graphs", error.status, error.function) from None
    return out


# Experts.forward as an operator: x float16 [M, hidden], topk_ids int32 [M, top_k], topk_weights float32
# [M, top_k] -> a new float16 [M, hidden], on torch's current stream. experts_key: register(experts).
moe_forward = _define_moe_operator("moe_forward", _moe_forward_cuda, (torch.float16,))


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
