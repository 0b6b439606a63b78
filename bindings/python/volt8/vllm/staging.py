"""One rank's MTP experts gathered, tensor by tensor as an engine's weight loader hands them over, into
host arrays in volt8's device layout. Each expert is sharded (or quantized) by the library itself
(volt8_expert_shard_host) once all its tensors are in, so a rank holds exactly the bytes
volt8.load_host_checkpoint / Experts.load give it from the same checkpoint. Imports neither vLLM nor
torch (torch CPU tensors are taken as they come, as are numpy arrays).
"""
import ctypes

import numpy

from .. import _abi
from .._integers import integer
from .._library import check, load
from ..errors import Error, InvalidArgumentError
from ..shape import MoeShape

PROJECTIONS = ("gate", "up", "down")
# numpy or torch dtype names -> safetensors names, and the integer view their bytes travel in
_DTYPES = {"float8_e4m3fn": ("F8_E4M3", "uint8"), "bfloat16": ("BF16", "uint16"), "float16": ("F16", "uint16"),
           "float32": ("F32", "uint32")}
_ONLINE_DTYPES = ("BF16", "F16", "F32")
_SCALE_DTYPES = ("F32", "BF16", "F16")


def _ceil_div(value, divisor):
    return -(-value // divisor)


def host_bytes(tensor, name):
    """(numpy integer view of the tensor's bytes, safetensors dtype name, shape) of a torch CPU tensor or a
    numpy array (ml_dtypes' bfloat16 and float8_e4m3fn included); a contiguous copy when it is not
    contiguous."""
    dtype_name = str(tensor.dtype).replace("torch.", "")
    if dtype_name not in _DTYPES:
        raise InvalidArgumentError(f"{name}: dtype {dtype_name} is not one volt8 reads "
                                   f"({', '.join(sorted(_DTYPES))})")
    st_name, view = _DTYPES[dtype_name]
    shape = tuple(int(extent) for extent in tensor.shape)
    if isinstance(tensor, numpy.ndarray):
        array = numpy.ascontiguousarray(tensor).view(view)
    else:  # torch: through an integer view, which numpy can hold (numpy has no bfloat16 or FP8)
        import torch
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        integer = {"uint8": torch.uint8, "uint16": torch.int16, "uint32": torch.int32}[view]
        array = tensor.detach().contiguous().view(integer).numpy().view(view)
    return array, st_name, shape


class ExpertStaging:
    """The experts [expert_start, expert_start + count) of a layer of num_experts experts (hidden x
    intermediate each, the checkpoint's full width) for tensor-parallel rank tp_rank of tp_size:
    native E4M3 experts with 128x128 block scales (online_block_n 0), or unquantized ones quantized
    at load (online_block_n 1 or 128). add() takes each tensor; arrays() gives (MoeShape, w13, s13,
    w2, s2) for Experts.from_host once every expert is complete."""

    def __init__(self, hidden, intermediate, num_experts, tp_size=1, tp_rank=0, expert_start=0, expert_count=0,
                 online_block_n=0, layer="experts"):
        # any integer type (np.int64 too: __index__), never a bool or a float, within what the C side takes
        hidden, intermediate, num_experts, tp_size, tp_rank, expert_start, expert_count = (
            integer(value, what, low, 2**31 - 1)
            for value, what, low in ((hidden, "hidden", 1), (intermediate, "intermediate", 1),
                                     (num_experts, "num_experts", 1), (tp_size, "tp_size", 1), (tp_rank, "tp_rank", 0),
                                     (expert_start, "expert_start", 0), (expert_count, "expert_count", 0)))
        online_block_n = integer(online_block_n, "online_block_n", 0, 128,
                                 "0 (native experts), or 1 or 128 (the rows of a scale block at load)")
        if online_block_n not in (0, 1, 128):
            raise InvalidArgumentError(f"online_block_n: {online_block_n!r} is not 0 (native experts), or 1 or 128 "
                                       f"(the rows of a scale block at load)")
        if not isinstance(layer, str):
            raise InvalidArgumentError(f"layer: {layer!r} is not a str (the layer's name in messages)")
        count = expert_count or num_experts
        if expert_start + count > num_experts:
            raise InvalidArgumentError(f"experts [{expert_start}, {expert_start + count}) are not all among the "
                                       f"layer's {num_experts}")
        c_shape = _abi.MoeShape()
        check(load().volt8_shard_rank_shape(None, hidden, intermediate, tp_size, tp_rank, online_block_n,
                                            ctypes.byref(c_shape)), "volt8_shard_rank_shape")
        whole = count == num_experts
        self.shape = MoeShape(**dict(MoeShape.from_c(c_shape).__dict__, num_experts=count,
                                     expert_start=0 if whole else expert_start, global_experts=0 if whole else num_experts))
        self.layer = layer
        self.hidden, self.intermediate, self.num_experts = hidden, intermediate, num_experts
        self.tp_size, self.tp_rank, self.online_block_n = tp_size, tp_rank, online_block_n
        self.expert_start, self.expert_count = expert_start, count
        layout = self.shape.layout()
        self._arrays = {name: numpy.empty(layout[name], numpy.uint8 if name[0] == "w" else numpy.uint16)
                        for name in ("w13", "s13", "w2", "s2")}
        self._pending = {}  # local expert -> {(projection, kind): (array, dtype, name)}
        self._complete = numpy.zeros(count, bool)

    @property
    def native(self):
        return self.online_block_n == 0

    def holds(self, expert):
        """True when global expert `expert` (any integer type, not a bool) is one of this rank's."""
        number = integer(expert, "expert", -2**63, 2**63 - 1)
        return self.expert_start <= number < self.expert_start + self.expert_count

    def _needed(self):
        kinds = ("weight", "scale") if self.native else ("weight",)
        return [(projection, kind) for projection in PROJECTIONS for kind in kinds]

    def add(self, expert, projection, kind, tensor, name=None):
        """Takes global expert `expert`'s `projection` ("gate", "up" or "down") `kind` ("weight", or "scale"
        for native experts: the 128x128 block grid, 2-D or ModelOpt's 4-D [rows, 1, cols, 1]). A tensor
        of another rank's expert is refused (holds() says which are this rank's). The expert is sharded
        as soon as its last tensor is in, and its whole tensors are dropped."""
        expert = integer(expert, "expert", 0, 2**31 - 1, f"an expert number of the layer (0..{self.num_experts - 1})")
        name = name or f"{self.layer}.{expert}.{projection}_proj.{kind}"
        if self._arrays is None:
            raise InvalidArgumentError(f"{name}: the staging was released (arrays() were taken, or release() called)")
        if projection not in PROJECTIONS or kind not in ("weight", "scale"):
            raise InvalidArgumentError(f"{name}: projection {projection!r} / kind {kind!r}: need one of {PROJECTIONS} "
                                       f"and weight or scale")
        if not self.holds(expert):
            raise InvalidArgumentError(f"{name}: expert {expert} is not among this rank's "
                                       f"[{self.expert_start}, {self.expert_start + self.expert_count})")
        if kind == "scale" and not self.native:
            raise InvalidArgumentError(f"{name}: a scale for experts that are quantized at load (they come "
                                       f"unquantized, without scales)")
        local = expert - self.expert_start
        if self._complete[local] or (projection, kind) in self._pending.get(local, {}):
            raise InvalidArgumentError(f"{name}: expert {expert}'s {projection} {kind} was given twice")
        array, dtype, shape = host_bytes(tensor, name)
        rows, cols = (self.hidden, self.intermediate) if projection == "down" else (self.intermediate, self.hidden)
        if kind == "weight":
            wanted = [rows, cols]
            allowed = ("F8_E4M3",) if self.native else _ONLINE_DTYPES
            if dtype not in allowed:
                raise InvalidArgumentError(
                    f"{name}: dtype {dtype}; " + ("native experts are F8_E4M3 (unquantized experts are quantized at "
                                                  "load only when asked for)" if self.native else
                                                  "experts quantized at load come as BF16, F16 or F32"))
        else:
            wanted = [_ceil_div(rows, 128), _ceil_div(cols, 128)]
            if len(shape) == 4 and shape[1] == shape[3] == 1:
                shape = (shape[0], shape[2])
            if dtype not in _SCALE_DTYPES:
                raise InvalidArgumentError(f"{name}: scale dtype {dtype}; block scales are F32, BF16 or F16")
        if list(shape) != wanted:
            raise InvalidArgumentError(f"{name}: shape {list(tensor.shape)}, expected {wanted}"
                                       + (" (128x128 block scales)" if kind == "scale" else ""))
        pending = self._pending.setdefault(local, {})
        pending[(projection, kind)] = (array, dtype, name)
        if len(pending) == len(self._needed()):
            try:
                self._shard(local, pending)
            except Exception as error:
                # nothing of the expert stays pending: all its tensors can be given again
                del self._pending[local]
                if isinstance(error, Error):
                    error.message = f"{error.message}; expert {expert}'s tensors were dropped: give them all again"
                    error.args = (error.message,) + error.args[1:]
                raise
            del self._pending[local]
            self._complete[local] = True

    def _shard(self, local, pending):
        for kind in ("weight", "scale") if self.native else ("weight",):
            dtypes = {pending[(projection, kind)][1] for projection in PROJECTIONS}
            if len(dtypes) > 1:
                raise InvalidArgumentError(f"{self.layer}: expert {self.expert_start + local}'s {kind}s mix dtypes "
                                           f"{sorted(dtypes)}")
        tensors = _abi.ExpertTensors(hidden=self.hidden, intermediate=self.intermediate,
                                     expert=self.expert_start + local)  # messages name the layer's number
        keep = []
        for index, projection in enumerate(PROJECTIONS):
            array, dtype, name = pending[(projection, "weight")]
            tensors.weight_dtype = dtype.encode()
            tensors.weights[index] = array.ctypes.data
            encoded = name.encode("utf-8", "replace")
            keep.append(encoded)
            tensors.names[index] = encoded
            if self.native:
                scale, scale_dtype, _ = pending[(projection, "scale")]
                tensors.scales[index] = scale.ctypes.data
                tensors.scale_dtype = scale_dtype.encode()
        pointer = lambda array, kind: ctypes.cast(array[local].ctypes.data, ctypes.POINTER(kind))
        out = _abi.HostExperts(w13=pointer(self._arrays["w13"], ctypes.c_uint8),
                               s13=pointer(self._arrays["s13"], ctypes.c_uint16),
                               w2=pointer(self._arrays["w2"], ctypes.c_uint8),
                               s2=pointer(self._arrays["s2"], ctypes.c_uint16))
        check(load().volt8_expert_shard_host(None, ctypes.byref(tensors), self.tp_size, self.tp_rank,
                                             self.online_block_n, ctypes.byref(out)), "volt8_expert_shard_host")

    def missing(self):
        """What is still to come: [(global expert, [(projection, kind), ...])] of incomplete experts."""
        result = []
        for local in numpy.flatnonzero(~self._complete):
            have = self._pending.get(int(local), {})
            result.append((self.expert_start + int(local), [key for key in self._needed() if key not in have]))
        return result

    @property
    def complete(self):
        return bool(self._complete.all())

    def arrays(self):
        """(MoeShape, w13, s13, w2, s2): the rank's experts in the device layout; every expert must be in."""
        if self._arrays is None:
            raise InvalidArgumentError(f"{self.layer}: the staging was released")
        missing = self.missing()
        if missing:
            first, what = missing[0]
            raise InvalidArgumentError(f"{self.layer}: {len(missing)} of the rank's {self.expert_count} experts are "
                                       f"incomplete; expert {first} lacks " + ", ".join(f"{p} {k}" for p, k in what))
        arrays = self._arrays
        return self.shape, arrays["w13"], arrays["s13"], arrays["w2"], arrays["s2"]

    def release(self):
        """Drops the host arrays and anything pending."""
        self._arrays = None
        self._pending = {}

    @property
    def nbytes(self):
        """Bytes of the staged arrays (the rank's resident weights and scales, without alignment)."""
        return 0 if self._arrays is None else sum(array.nbytes for array in self._arrays.values())
