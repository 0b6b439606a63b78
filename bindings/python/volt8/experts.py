"""Experts: one rank's MoE experts resident on the GPU in E4M3, and their forward."""
import ctypes
import operator
import weakref

from . import _abi, _torch_fast
from ._arrays import allocator_for, parse, require_alignment, require_device, require_shape, stream_handle
from ._integers import is_integer
from ._library import load
from ._strings import c_string
from .checkpoint import experts_arrays, host_experts, int32_argument, load_options
from .context import Context
from .errors import InvalidArgumentError
from .reports import LoadReport, MemoryReport
from .shape import MoeShape

MAX_ROUTED_PAIRS = 1 << 30  # max_tokens x max_top_k: the kernels index pairs in 32 bits (VOLT8_MAX_ROUTED_PAIRS)


class Experts:
    """Resident experts of one tensor-parallel rank. Make them with Experts.load (a checkpoint) or
    Experts.from_host (arrays in the device layout). `shape` is this rank's MoeShape; forwards take up
    to `max_tokens` tokens (prepare() raises it) and `max_top_k` experts a token."""

    def __init__(self, ctx, handle, shape, max_tokens, max_top_k, load_report=None):
        self.ctx = ctx
        self.shape = shape
        self.max_tokens = max_tokens
        self.max_top_k = min(max_top_k, shape.model_experts)  # the library's workspace never holds more
        self.load_report = load_report
        self._handle = handle
        self._graphs = weakref.WeakSet()
        self._finalizer = weakref.finalize(self, load().volt8_experts_destroy, handle)
        # torch tensors' forward: one argument struct and the bound C function, made once
        self._torch_forward = _torch_fast.ForwardCall(ctx, load(), shape.hidden) if isinstance(ctx, Context) else None
        ctx.adopt(self)

    @classmethod
    def load(cls, ctx, checkpoint_dir, *, tp_size=1, tp_rank=0, draft_checkpoint_dir=None, max_tokens=64,
             max_top_k=16, mtp_expert_quantization=None, online_block_n=128, mtp_layer=0, expert_start=0,
             expert_count=0):
        """Reads, validates and shards a checkpoint's MTP experts (safetensors, ModelOpt or block-FP8
        metadata) and uploads rank `tp_rank`'s share, reading the checkpoint once; the rank's shape
        comes from the loaded handle. All-or-nothing. max_tokens x max_top_k (max_top_k at most the
        experts) sizes the workspace, at most MAX_ROUTED_PAIRS, checked before anything is uploaded;
        load_report.workspace_bytes says what it took, and a workspace the GPU has no room for raises
        OutOfMemoryError naming its bytes.
        Expert parallelism: expert_start, expert_count (0: all) name the experts this rank holds
        (expert_range() splits them); forwards then take global ids and skip other ranks' pairs."""
        report = _abi.LoadReport()
        options = load_options(checkpoint_dir, tp_size=tp_size, tp_rank=tp_rank,
                               draft_checkpoint_dir=draft_checkpoint_dir, max_tokens=max_tokens, max_top_k=max_top_k,
                               mtp_expert_quantization=mtp_expert_quantization, online_block_n=online_block_n,
                               mtp_layer=mtp_layer, report=report, expert_start=expert_start,
                               expert_count=expert_count)
        if tp_rank >= tp_size:
            raise InvalidArgumentError(f"tp_rank: {tp_rank} is not below tp_size {tp_size}")
        ctx.require_device()
        handle = ctypes.c_void_p()
        ctx.call("volt8_experts_load", ctx.handle, ctypes.byref(options), ctypes.byref(handle))
        c_shape = _abi.MoeShape()
        try:
            ctx.call("volt8_experts_shape", handle, ctypes.byref(c_shape))
        except BaseException:
            load().volt8_experts_destroy(handle)
            raise
        return cls(ctx, handle.value, MoeShape.from_c(c_shape), max_tokens, max_top_k, LoadReport.from_c(report))

    @classmethod
    def from_host(cls, ctx, experts, *, max_tokens=64, max_top_k=16):
        """Uploads host experts: a HostCheckpoint, or (MoeShape, w13, s13, w2, s2) numpy arrays in the
        device layout (MoeShape.layout())."""
        shape, w13, s13, w2, s2 = experts_arrays(experts)
        max_tokens = int32_argument(max_tokens, "max_tokens", 1)
        max_top_k = int32_argument(max_top_k, "max_top_k", 1)
        struct, _ = host_experts(shape, w13, s13, w2, s2)
        c_shape = shape.to_c()
        handle = ctypes.c_void_p()
        ctx.call("volt8_experts_create_from_host", ctx.handle, ctypes.byref(c_shape), ctypes.byref(struct),
                 max_tokens, max_top_k, ctypes.byref(handle))
        load_report = experts.report if hasattr(experts, "report") else None
        return cls(ctx, handle.value, shape, max_tokens, max_top_k, load_report)

    def __repr__(self):
        state = "closed" if self._handle is None else f"max_tokens={self.max_tokens} max_top_k={self.max_top_k}"
        return f"<volt8.Experts {self.shape} {state}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Frees the device memory, after the graphs captured from these experts. Idempotent."""
        for graph in list(self._graphs):
            graph.close()
        self._finalizer()
        self._handle = None

    @property
    def handle(self):
        if self._handle is None:
            raise InvalidArgumentError("the volt8.Experts are closed")
        return self._handle

    def _call(self, function, *args):
        self.ctx.call(function, self.handle, *args)

    def prepare(self, token_counts):
        """Compiles (or loads from the cache) every variant forwards of these token counts use, for every
        top_k up to max_top_k, and grows the workspace; nothing compiles or allocates later (needed
        before capturing a forward into a CUDA graph). Not during capture."""
        counts = [token_counts] if is_integer(token_counts) else list(token_counts)
        limit = MAX_ROUTED_PAIRS // self.max_top_k
        for index, count in enumerate(counts):
            if not is_integer(count) or not 1 <= operator.index(count) <= limit:
                raise InvalidArgumentError(f"token_counts[{index}]: {count!r} is not in 1..{limit} "
                                           f"(at most {MAX_ROUTED_PAIRS} routed pairs at top_k {self.max_top_k})")
        counts = [operator.index(count) for count in counts]
        array = (ctypes.c_int32 * len(counts))(*counts)
        self._call("volt8_experts_prepare", array, len(counts))
        self.max_tokens = max([self.max_tokens] + counts)

    def _moe_args(self, x, topk_ids, topk_weights, out, check_ids):
        shape = self.shape
        x = parse(x, "x", ("float16",), ndim=2)
        tokens = x.shape[0]
        if not 1 <= tokens <= self.max_tokens:
            raise InvalidArgumentError(
                f"x: {tokens} tokens, outside 1..{self.max_tokens} (prepare() raises the maximum)")
        require_shape(x, (None, shape.hidden))
        topk_ids = parse(topk_ids, "topk_ids", ("int32",), ndim=2)
        top_k = topk_ids.shape[1]
        if not 1 <= top_k <= self.max_top_k:
            raise InvalidArgumentError(f"topk_ids: top_k {top_k} outside 1..{self.max_top_k}")
        require_shape(topk_ids, (tokens, top_k))
        topk_weights = parse(topk_weights, "topk_weights", ("float32",), ndim=2)
        require_shape(topk_weights, (tokens, top_k))
        if out is None:
            out = _empty_like(x)
        out_array = parse(out, "out", ("float16",), ndim=2, writable=True)
        require_shape(out_array, (tokens, shape.hidden))
        arrays = (x, topk_ids, topk_weights, out_array)
        for array, alignment in zip(arrays, (16, 4, 4, 16)):
            require_alignment(array, alignment)
        require_device(arrays, self.ctx.device)
        args = _abi.MoeArgs(num_tokens=tokens, top_k=top_k, x=x.pointer, topk_ids=topk_ids.pointer,
                            topk_weights=topk_weights.pointer, out=out_array.pointer, check_ids=int(bool(check_ids)))
        return args, arrays, out

    def forward(self, x, topk_ids, topk_weights, out=None, stream=None, *, check_ids=False):
        """out[t] = sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(x[t]), enqueued on `stream`
        (default: the current stream of the tensors' framework, torch or CuPy). x: float16 [M, hidden];
        topk_ids: int32 [M, top_k]; topk_weights: float32 [M, top_k]; out: float16 [M, hidden], allocated
        like x when left out (torch or CuPy). Returns out. check_ids=True copies topk_ids to the host and
        rejects ids outside [0, E) before any launch (synchronises; not while capturing); otherwise
        such pairs are skipped and counted (bad_id_count())."""
        if self._torch_forward is not None:
            result = self._torch_forward(self, x, topk_ids, topk_weights, out, stream, check_ids, False)
            if result is not None:
                return result
        args, arrays, out = self._moe_args(x, topk_ids, topk_weights, out, check_ids)
        handle = stream_handle(stream, arrays, self.ctx.device)
        self._call("volt8_moe_forward", ctypes.byref(args), handle)
        return out

    __call__ = forward

    def capture(self, x, topk_ids, topk_weights, out, stream=None):
        """Captures one forward with these tensors into a volt8 Graph (their addresses are baked in;
        their contents may change between launches). `stream` is used for the capture only
        (None: a private one). For a torch.cuda.CUDAGraph, call forward() inside its capture instead."""
        args, arrays, out = self._moe_args(x, topk_ids, topk_weights, out, 0)
        handle = 0 if stream is None else stream_handle(stream, arrays, self.ctx.device)
        graph_handle = ctypes.c_void_p()
        self._call("volt8_graph_capture", ctypes.byref(args), handle, ctypes.byref(graph_handle))
        graph = Graph(self, graph_handle.value, arrays)
        self._graphs.add(graph)
        return graph

    def memory(self):
        """MemoryReport: resident bytes (weights and scales), workspace, and FP16 / padded comparisons."""
        report = _abi.MemoryReport()
        self._call("volt8_experts_memory", ctypes.byref(report))
        return MemoryReport.from_c(report)

    def bad_id_count(self):
        """Routed pairs the last forward skipped because their id was outside [0, E) (synchronises)."""
        count = ctypes.c_int32()
        self._call("volt8_experts_bad_id_count", ctypes.byref(count))
        return count.value

    def set_variants(self, gate_up=None, down=None):
        """Experimental: pin the gate_up and down kernel variants by name (None restores the dispatch policy)."""
        self._call("volt8_experts_set_variants", c_string(gate_up, "gate_up"), c_string(down, "down"))


class Graph:
    """One forward captured into an instantiated CUDA graph; keeps its tensors alive."""

    def __init__(self, experts, handle, arrays):
        self.experts = experts
        self._arrays = arrays
        self._handle = handle
        self._finalizer = weakref.finalize(self, load().volt8_graph_destroy, handle)
        experts.ctx.adopt(self)

    def launch(self, stream=None):
        """Replays the forward on `stream` (default: the current stream of the captured tensors' framework)."""
        if self._handle is None:
            raise InvalidArgumentError("the volt8.Graph is closed")
        handle = stream_handle(stream, self._arrays, self.experts.ctx.device)
        self.experts.ctx.call("volt8_graph_launch", self._handle, handle)

    def close(self):
        self._finalizer()
        self._handle = None
        self._arrays = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _empty_like(x):
    module = allocator_for([x])
    if module is None:
        raise InvalidArgumentError("out: needed (the binding allocates it only for torch and CuPy inputs)")
    if module.__name__ == "torch":
        return module.empty_like(x.obj)
    with x.obj.device:
        return module.empty(x.shape, dtype=module.float16)
