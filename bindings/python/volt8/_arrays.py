"""Arrays and streams at the ABI boundary: anything with __cuda_array_interface__ (device) or
__array_interface__ (host), checked for dtype, shape, contiguity and device before a call."""
import ctypes
import sys

from .errors import InvalidArgumentError

_KINDS = {"f": "float", "i": "int", "u": "uint", "b": "bool", "c": "complex"}


class Array:
    """One checked argument: its data pointer, shape, dtype name and where it lives."""

    __slots__ = ("name", "obj", "pointer", "shape", "dtype", "on_device", "framework", "device", "readonly")

    def __init__(self, name, obj, pointer, shape, dtype, on_device, framework, device, readonly):
        self.name, self.obj, self.pointer, self.shape, self.dtype = name, obj, pointer, shape, dtype
        self.on_device, self.framework, self.device, self.readonly = on_device, framework, device, readonly

    @property
    def size(self):
        count = 1
        for extent in self.shape:
            count *= extent
        return count


def framework_of(obj):
    module = type(obj).__module__.split(".")[0]
    return module if module in ("torch", "cupy", "numpy") else None


def is_device_array(obj):
    return obj is not None and _interface(obj, "__cuda_array_interface__", "x", quiet=True) is not None


def _interface(obj, attribute, name, quiet=False):
    try:
        return getattr(obj, attribute)
    except AttributeError:
        return None
    except Exception as error:  # torch refuses tensors that require grad, and dtypes it cannot name
        if quiet:
            return None
        raise InvalidArgumentError(f"{name}: {attribute} is not available: {error}") from None


def _dtype_name(typestr, name):
    """"<f2" -> "float16", "|b1" -> "bool"; refuses big-endian data."""
    order, kind, size = typestr[0], typestr[1], typestr[2:]
    if order == ">" and size != "1":
        raise InvalidArgumentError(f"{name}: big-endian data ({typestr!r}) is not supported")
    if kind not in _KINDS or not size.isdigit():
        raise InvalidArgumentError(f"{name}: element type {typestr!r} is not one volt8 takes")
    return "bool" if kind == "b" else f"{_KINDS[kind]}{8 * int(size)}"


def _is_c_contiguous(shape, strides, itemsize):
    if strides is None:
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent == 0:
            return True
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _device_of(obj, framework, pointer):
    if framework == "torch":
        return obj.device.index if obj.device.type == "cuda" else None
    if framework == "cupy":
        return obj.device.id
    return pointer_device(pointer)


def parse(obj, name, dtypes, ndim=None, on_device=True, writable=False):
    """Checks `obj` (device: __cuda_array_interface__, host: __array_interface__) and returns an Array.
    dtypes: the accepted dtype names."""
    attribute = "__cuda_array_interface__" if on_device else "__array_interface__"
    interface = _interface(obj, attribute, name)
    if interface is None:
        got = type(obj).__name__
        if on_device:
            if _interface(obj, "__array_interface__", name, quiet=True) is not None:
                got = "a CPU array"
            raise InvalidArgumentError(f"{name}: needs a CUDA device array (__cuda_array_interface__), got {got}")
        raise InvalidArgumentError(f"{name}: needs a host array (__array_interface__, e.g. numpy), got {got}")
    if interface.get("mask") is not None:
        raise InvalidArgumentError(f"{name}: masked arrays are not supported")
    shape = tuple(int(extent) for extent in interface["shape"])
    dtype = _dtype_name(interface["typestr"], name)
    if dtype not in dtypes:
        accepted = " or ".join(dtypes)
        raise InvalidArgumentError(f"{name}: dtype is {dtype}, needs {accepted}")
    if ndim is not None and len(shape) != ndim:
        raise InvalidArgumentError(f"{name}: has {len(shape)} dimensions {list(shape)}, needs {ndim}")
    if not _is_c_contiguous(shape, interface.get("strides"), int(interface["typestr"][2:])):
        raise InvalidArgumentError(f"{name}: is not C-contiguous (strides {interface.get('strides')}); "
                                   f"pass a contiguous copy")
    data = interface["data"]
    if not isinstance(data, tuple):
        raise InvalidArgumentError(f"{name}: {attribute} data is not a (pointer, read-only) pair")
    pointer, readonly = int(data[0] or 0), bool(data[1])
    if writable and readonly:
        raise InvalidArgumentError(f"{name}: is read-only, and volt8 writes into it")
    framework = framework_of(obj)
    device = _device_of(obj, framework, pointer) if on_device else None
    return Array(name, obj, pointer, shape, dtype, on_device, framework, device, readonly)


def require_shape(array, shape):
    """shape: extents, None for any."""
    mismatch = any(want is not None and have != want for have, want in zip(array.shape, shape))
    if len(array.shape) != len(shape) or mismatch:
        wanted = "[" + ", ".join("*" if extent is None else str(extent) for extent in shape) + "]"
        raise InvalidArgumentError(f"{array.name}: has shape {list(array.shape)}, needs {wanted}")


def require_alignment(array, alignment):
    if array.pointer % alignment:
        raise InvalidArgumentError(f"{array.name}: data at {array.pointer:#x} is not {alignment}-byte aligned")


def require_device(arrays, device):
    """All arrays on `device` (an ordinal; None: any one device). Unknown devices are not checked."""
    known = [array for array in arrays if array is not None and array.device is not None]
    expected = device if device is not None and device >= 0 else (known[0].device if known else None)
    for array in known:
        if array.device != expected:
            raise InvalidArgumentError(
                f"{array.name}: is on CUDA device {array.device}, the call runs on device {expected}")


# ---- device of a raw pointer, through the driver when one is loaded ----

_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_CU_MEMORYTYPE_HOST = 1
_libcuda = None


def _driver():
    global _libcuda
    if _libcuda is None:
        try:
            library = ctypes.CDLL("libcuda.so.1")
            library.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
            library.cuPointerGetAttribute.restype = ctypes.c_int
            _libcuda = library
        except (OSError, AttributeError):
            _libcuda = False
    return _libcuda


def pointer_device(pointer):
    """The CUDA device ordinal holding `pointer`, or None when the driver cannot tell (no driver,
    not initialised, or not device memory the driver knows)."""
    if not pointer:
        return None
    driver = _driver()
    if not driver:
        return None
    memory_type, ordinal = ctypes.c_uint(0), ctypes.c_int(-1)
    if driver.cuPointerGetAttribute(ctypes.byref(memory_type), _CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pointer) != 0:
        return None
    if memory_type.value == _CU_MEMORYTYPE_HOST:
        return None
    if driver.cuPointerGetAttribute(ctypes.byref(ordinal), _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pointer) != 0:
        return None
    return ordinal.value


# ---- streams ----

def stream_handle(stream, arrays=(), device=None):
    """A CUstream as an int. stream: None (the current stream of the arrays' framework, torch or CuPy;
    else the legacy default stream, 0), an int handle, a torch.cuda.Stream, a CuPy stream, an object
    with __cuda_stream__, or a ctypes c_void_p."""
    if stream is None:
        return _current_stream(arrays, device)
    if isinstance(stream, bool):
        raise InvalidArgumentError("stream: a bool is not a stream")
    if isinstance(stream, int):
        if stream < 0:
            raise InvalidArgumentError(f"stream: handle {stream} is negative")
        return stream
    if isinstance(stream, ctypes.c_void_p):
        return stream.value or 0
    if hasattr(stream, "__cuda_stream__"):
        protocol = stream.__cuda_stream__
        value = protocol() if callable(protocol) else protocol
        return int(value[1])
    for attribute in ("cuda_stream", "ptr"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise InvalidArgumentError(f"stream: {type(stream).__name__} is not a CUDA stream (pass a torch or CuPy "
                               f"stream, or a raw CUstream handle as an int)")


def _current_stream(arrays, device):
    frameworks = {array.framework for array in arrays if array is not None and array.on_device}
    if "torch" in frameworks and "torch" in sys.modules:
        import torch
        index = device if device is not None and device >= 0 else torch.cuda.current_device()
        return int(torch.cuda.current_stream(index).cuda_stream)
    if "cupy" in frameworks and "cupy" in sys.modules:
        import cupy
        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def allocator_for(arrays):
    """The framework module (torch or cupy) that made these device arrays, for outputs the caller left out."""
    for array in arrays:
        if array is not None and array.framework in ("torch", "cupy"):
            return sys.modules[array.framework]
    return None
