"""Checkpoints without a GPU: plan() (what a load would do) and load_host_checkpoint() (one rank's
experts in host memory, in the device layout)."""
import ctypes
import weakref

from . import _abi
from ._arrays import parse, require_shape
from ._integers import integer
from ._library import check, load
from ._strings import c_path, c_string
from .context import Context
from .errors import InvalidArgumentError
from .reports import LoadReport, MemoryReport, PlanReport, RankPlan
from .shape import MoeShape


def int32_argument(value, name, low=-2**31, high=2**31 - 1):
    return integer(value, name, low, high)


def expert_range(num_experts, ep_size, ep_rank):
    """(expert_start, expert_count) of expert-parallel rank ep_rank of ep_size over num_experts experts, as the
    library splits them (volt8_expert_split): contiguous ranges, the first num_experts % ep_size ranks one
    expert more (as `volt8 plan --ep` splits)."""
    for value, name, low in ((num_experts, "num_experts", 1), (ep_size, "ep_size", 1), (ep_rank, "ep_rank", 0)):
        int32_argument(value, name, low)
    start, count = ctypes.c_int32(), ctypes.c_int32()
    check(load().volt8_expert_split(num_experts, ep_size, ep_rank, ctypes.byref(start), ctypes.byref(count)),
          "volt8_expert_split")
    return start.value, count.value


def load_options(checkpoint_dir, *, tp_size=1, tp_rank=0, draft_checkpoint_dir=None, max_tokens=64, max_top_k=16,
                 mtp_expert_quantization=None, online_block_n=128, mtp_layer=0, report=None, expert_start=0,
                 expert_count=0):
    """volt8_load_options from keyword arguments (the struct keeps the encoded strings alive).
    expert_start, expert_count: the experts [start, start + count) this rank holds (count 0: all)."""
    if checkpoint_dir is None and draft_checkpoint_dir is None:
        raise InvalidArgumentError("checkpoint_dir: needs a checkpoint folder (or draft_checkpoint_dir)")
    if mtp_expert_quantization is not None and not isinstance(mtp_expert_quantization, str):
        raise InvalidArgumentError(f"mtp_expert_quantization: {mtp_expert_quantization!r} is not a string (\"fp8\")")
    number = int32_argument
    options = _abi.LoadOptions(
        checkpoint_dir=c_path(checkpoint_dir, "checkpoint_dir"),
        draft_checkpoint_dir=c_path(draft_checkpoint_dir, "draft_checkpoint_dir"),
        tp_size=number(tp_size, "tp_size", 1), tp_rank=number(tp_rank, "tp_rank", 0),
        max_tokens=number(max_tokens, "max_tokens", 1), max_top_k=number(max_top_k, "max_top_k", 1),
        mtp_expert_quantization=c_string(mtp_expert_quantization, "mtp_expert_quantization"),
        online_block_n=number(online_block_n, "online_block_n"), mtp_layer=number(mtp_layer, "mtp_layer", 0),
        expert_start=number(expert_start, "expert_start", 0), expert_count=number(expert_count, "expert_count", 0))
    if report is not None:
        options.report = ctypes.pointer(report)
    return options


class _ScratchContext:
    """The caller's context, or a CPU-only one for the duration of a call."""

    def __init__(self, ctx):
        self.given = ctx

    def __enter__(self):
        self.ctx = self.given if self.given is not None else Context(device=None)
        return self.ctx

    def __exit__(self, *exc_info):
        if self.given is None:
            self.ctx.close()


def plan(checkpoint_dir, tp_size=1, *, draft_checkpoint_dir=None, mtp_expert_quantization=None, online_block_n=128,
         mtp_layer=0, max_tokens=64, max_top_k=16, ctx=None):
    """Parses the checkpoint and validates every MTP expert (no GPU needed); returns a PlanReport with
    each rank's shape and memory, whose workspace_bytes is the forward workspace a load with these
    max_tokens and max_top_k (a load's defaults) allocates. ctx: a Context to report errors through
    (default: a CPU-only one)."""
    options = load_options(checkpoint_dir, tp_size=tp_size, draft_checkpoint_dir=draft_checkpoint_dir,
                           mtp_expert_quantization=mtp_expert_quantization, online_block_n=online_block_n,
                           mtp_layer=mtp_layer, max_tokens=max_tokens, max_top_k=max_top_k)
    report = _abi.PlanReport()
    with _ScratchContext(ctx) as context:
        context.call("volt8_plan", context.handle, ctypes.byref(options), ctypes.byref(report))
        ranks = []
        for rank in range(report.tp_size):
            shape, memory = _abi.MoeShape(), _abi.MemoryReport()
            context.call("volt8_plan_rank", context.handle, ctypes.byref(report), rank, ctypes.byref(shape),
                         ctypes.byref(memory))
            ranks.append(RankPlan(rank, MoeShape.from_c(shape), MemoryReport.from_c(memory)))
    return PlanReport.from_c(report, ranks)


class _LibraryMemory:
    """A volt8_host_checkpoint, freed when the last array over it is gone."""

    def __init__(self, pointer):
        self.finalizer = weakref.finalize(self, load().volt8_host_checkpoint_free, pointer)


class _OwnedArray:
    """An __array_interface__ over memory the library owns; numpy keeps it (and its owner) alive."""

    def __init__(self, owner, pointer, shape, typestr):
        self.owner = owner
        self.__array_interface__ = {"shape": shape, "typestr": typestr, "data": (pointer, True), "version": 3}


class HostCheckpoint:
    """One rank's experts in host memory, in the device layout of runtime/moe/kernels/moe_layout.h:
    w13 uint8 [E, 2I, H] (gate rows, then up rows), s13 uint16 [E, 2, G13, ceil(H/bk)], w2 uint8 [E, H, I],
    s2 uint16 [E, ceil(H/bn), G2]; weights are E4M3 bytes, scales FP16 bits of scale * 2^8.
    The arrays are read-only views of the library's memory, freed when the last of them is gone."""

    def __init__(self, pointer):
        import numpy
        memory = _LibraryMemory(pointer)
        contents = pointer.contents
        self.shape = MoeShape.from_c(contents.shape)
        self.report = LoadReport.from_c(contents.report)
        layout = self.shape.layout()
        experts = contents.experts
        for name, typestr in (("w13", "|u1"), ("s13", "<u2"), ("w2", "|u1"), ("s2", "<u2")):
            address = ctypes.cast(getattr(experts, name), ctypes.c_void_p).value
            setattr(self, name, numpy.asarray(_OwnedArray(memory, address, layout[name], typestr)))

    def arrays(self):
        return {"w13": self.w13, "s13": self.s13, "w2": self.w2, "s2": self.s2}


def load_host_checkpoint(checkpoint_dir, *, tp_size=1, tp_rank=0, draft_checkpoint_dir=None,
                         mtp_expert_quantization=None, online_block_n=128, mtp_layer=0, expert_start=0, expert_count=0,
                         ctx=None):
    """Reads, validates and shards one rank's experts into host memory (no GPU): a HostCheckpoint.
    expert_start, expert_count: expert parallelism, the experts [start, start + count) (count 0: all)."""
    options = load_options(checkpoint_dir, tp_size=tp_size, tp_rank=tp_rank, draft_checkpoint_dir=draft_checkpoint_dir,
                           mtp_expert_quantization=mtp_expert_quantization, online_block_n=online_block_n,
                           mtp_layer=mtp_layer, expert_start=expert_start, expert_count=expert_count)
    pointer = ctypes.POINTER(_abi.HostCheckpoint)()
    with _ScratchContext(ctx) as context:
        context.call("volt8_checkpoint_load_host", context.handle, ctypes.byref(options), ctypes.byref(pointer))
    return HostCheckpoint(pointer)


def host_experts(shape, w13, s13, w2, s2):
    """volt8_host_experts over host arrays checked against `shape`'s layout; returns (struct, arrays)."""
    layout = shape.layout()
    given = {"w13": w13, "s13": s13, "w2": w2, "s2": s2}
    arrays = {}
    for name, value in given.items():
        dtypes = ("uint8",) if name.startswith("w") else ("uint16", "float16")
        arrays[name] = parse(value, name, dtypes, on_device=False)
        require_shape(arrays[name], layout[name])
    struct = _abi.HostExperts(**{name: ctypes.cast(arrays[name].pointer, ctypes.POINTER(ctypes.c_uint8 if name[0] == "w"
                                                                                      else ctypes.c_uint16))
                                 for name in given})
    return struct, arrays


def experts_arrays(experts):
    """(shape, w13, s13, w2, s2) from a HostCheckpoint or such a tuple."""
    if isinstance(experts, HostCheckpoint):
        return experts.shape, experts.w13, experts.s13, experts.w2, experts.s2
    try:
        shape, w13, s13, w2, s2 = experts
    except (TypeError, ValueError):
        raise InvalidArgumentError("experts: needs a HostCheckpoint or (MoeShape, w13, s13, w2, s2)") from None
    if not isinstance(shape, MoeShape):
        raise InvalidArgumentError(f"experts: the first item must be a MoeShape, got {type(shape).__name__}")
    return shape, w13, s13, w2, s2
