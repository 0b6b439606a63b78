"""The forward's fast path for torch tensors: the checks of _arrays.parse done on torch's own attributes
(dtype, shape, contiguity, device, data_ptr) instead of parsing __cuda_array_interface__, the stream
read as a raw handle, and one volt8_moe_args per Experts filled in place. Anything it does not accept
goes the general way (Experts._moe_args), which raises the error that names the bad argument; so this
path changes how fast a valid call is made, never what is accepted or what an error says.

torch is never imported here: the path turns on once the caller has imported it.
"""
import ctypes
import struct
import sys

from . import _abi
from ._library import check

_INVALID_ARGUMENT = 1
_torch = None  # (Tensor, float16, int32, float32, raw stream function or None, empty_like), once torch is imported


def _torch_state():
    global _torch
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "empty_like"):  # not imported, or still importing
        return None
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _torch = (torch.Tensor, torch.float16, torch.int32, torch.float32, raw_stream, torch.empty_like)
    return _torch


def current_stream(device):
    """torch's current stream on CUDA device `device` as a CUstream int."""
    state = _torch or _torch_state()
    if state[4] is not None:
        return state[4](device)
    return int(sys.modules["torch"].cuda.current_stream(device).cuda_stream)


def _args_packer():
    """(offset, Struct) that writes volt8_moe_args' fields from num_tokens to check_ids in one pack_into,
    laid out from the ctypes mirror's own offsets."""
    fields = (("num_tokens", "i"), ("top_k", "i"), ("x", "Q"), ("topk_ids", "Q"), ("topk_weights", "Q"), ("out", "Q"),
              ("check_ids", "i"))
    start = position = _abi.MoeArgs.num_tokens.offset
    layout = "<"
    for name, code in fields:
        offset = getattr(_abi.MoeArgs, name).offset
        layout += "x" * (offset - position) + code
        position = offset + struct.calcsize("<" + code)
    return start, struct.Struct(layout)


_ARGS_OFFSET, _ARGS_LAYOUT = _args_packer()


class ForwardCall:
    """One Experts' forward from torch tensors: the volt8_moe_args struct and the bound C function,
    made once; the struct is filled and passed under the context's lock."""

    __slots__ = ("args", "args_ref", "pack", "function", "lock", "device", "hidden")

    def __init__(self, ctx, library, hidden):
        self.args = _abi.MoeArgs()
        self.pack = _ARGS_LAYOUT.pack_into
        self.args_ref = ctypes.byref(self.args)
        self.function = library.volt8_moe_forward
        self.lock = ctx._lock
        self.device = ctx.device  # fixed for a context's life, as the experts' hidden size is
        self.hidden = hidden

    def __call__(self, experts, x, topk_ids, topk_weights, out, stream, check_ids, allow_grad):
        """The forward of `experts` (the Experts holding this object; passed, not kept, so that no cycle
        delays freeing them): out, or None when the general path must take the call (not torch, or an
        argument it would refuse). allow_grad: tensors that require grad are read as they are (the
        operator's inputs); Experts.forward leaves them to the general path, which refuses them.

        Checked here: what the library cannot see (dtypes, shapes, contiguity, device, grad). The token
        and top-k ranges and the alignment the library checks itself before any launch; when it refuses
        an argument, the general path's checks run to name it as they would have."""
        state = _torch or _torch_state()
        if state is None:
            return None
        tensor, float16, int32, float32, raw_stream, empty_like = state
        if type(x) is not tensor or type(topk_ids) is not tensor or type(topk_weights) is not tensor:
            return None
        if x.dtype is not float16 or topk_ids.dtype is not int32 or topk_weights.dtype is not float32:
            return None
        handle = experts._handle
        device = self.device
        x_shape = x.shape
        ids_shape = topk_ids.shape
        if (handle is None or device < 0 or len(x_shape) != 2 or len(ids_shape) != 2 or topk_weights.shape != ids_shape
                or x_shape[0] != ids_shape[0] or x_shape[1] != self.hidden):
            return None
        if not (x.is_contiguous() and topk_ids.is_contiguous() and topk_weights.is_contiguous()):
            return None
        if x.get_device() != device or topk_ids.get_device() != device or topk_weights.get_device() != device:
            return None
        if not allow_grad and (x.requires_grad or topk_weights.requires_grad):  # integer ids never require grad
            return None
        if out is None:
            out = empty_like(x)  # x's dtype, shape, device and (contiguous) layout
        elif (type(out) is not tensor or out.dtype is not float16 or out.shape != x_shape or not out.is_contiguous()
              or out.get_device() != device or (not allow_grad and out.requires_grad)):
            return None
        if stream is None:
            stream = raw_stream(device) if raw_stream is not None else current_stream(device)
        elif type(stream) is not int:
            stream = getattr(stream, "cuda_stream", None)  # a torch.cuda.Stream
            if type(stream) is not int:
                return None
        if stream < 0:
            return None
        with self.lock:  # the context's lock also keeps two threads from filling the one struct at once
            self.pack(self.args, _ARGS_OFFSET, x_shape[0], ids_shape[1], x.data_ptr(), topk_ids.data_ptr(),
                      topk_weights.data_ptr(), out.data_ptr(), 1 if check_ids else 0)
            status = self.function(handle, self.args_ref, stream)
            if status:
                if status == _INVALID_ARGUMENT:
                    # the general path's checks name a bad argument as they would have (raising here)
                    experts._moe_args(x.detach(), topk_ids.detach(), topk_weights.detach(), out, check_ids)
                check(status, "volt8_moe_forward", experts.ctx.handle)
        return out
