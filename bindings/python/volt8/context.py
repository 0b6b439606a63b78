"""Context: a volt8_ctx (device, kernel cache, last-error message)."""
import ctypes
import os
import threading
import weakref

from . import _abi, _nvrtc
from ._integers import integer, is_integer
from ._library import check, last_error, load
from ._strings import c_path, c_string
from .errors import InvalidArgumentError, NoDeviceError
from .shape import MoeShape


def device_ordinal(device):
    """An int ordinal (-1: no device) from an int, None, "cpu", "cuda", "cuda:N" or a torch.device."""
    if device is None:
        return -1
    if isinstance(device, bool):
        raise InvalidArgumentError("device: a bool is not a device")
    if is_integer(device):
        return integer(device, "device", -1, 2**31 - 1)
    kind, index = (device.split(":") + [None])[:2] if isinstance(device, str) else (
        getattr(device, "type", None), getattr(device, "index", None))
    if kind == "cpu":
        return -1
    if kind == "cuda" and index is None:
        import torch
        return torch.cuda.current_device()
    if kind == "cuda" and str(index).isdigit():
        return int(index)
    raise InvalidArgumentError(f"device: {device!r} is not a CUDA device")


def nvrtc_folders(nvrtc_dirs):
    """(nvrtc_dirs, nvrtc_dir_list) of volt8_ctx_options: a string stays the ':'-separated list it is;
    the folders of a list (or of the NVRTC wheel, for None) go one by one, each whole."""
    if isinstance(nvrtc_dirs, (str, bytes, os.PathLike)):
        return c_path(nvrtc_dirs, "nvrtc_dirs"), None
    if nvrtc_dirs is None:
        folders = _nvrtc.wheel_folders()
    else:
        try:
            folders = list(nvrtc_dirs)
        except TypeError:
            raise InvalidArgumentError(f"nvrtc_dirs: {nvrtc_dirs!r} is not a list of folders") from None
    if len(folders) > _abi.NVRTC_DIR_LIST_MAX:
        raise InvalidArgumentError(f"nvrtc_dirs: {len(folders)} folders, at most {_abi.NVRTC_DIR_LIST_MAX}")
    encoded = [c_path(folder, f"nvrtc_dirs[{index}]") for index, folder in enumerate(folders)]
    for index, folder in enumerate(encoded):
        if not folder:
            raise InvalidArgumentError(f"nvrtc_dirs[{index}]: an empty path names no folder")
    return None, (ctypes.c_char_p * len(encoded))(*encoded) if encoded else None


class Context:
    """A volt8 context on one CUDA device (device=-1 or None: CPU paths only). A machine without a GPU
    driver still gets a context; GPU calls on it raise NoDeviceError.

    nvrtc_dirs: folders searched for NVRTC after $VOLT8_NVRTC and an NVRTC already loaded in the
    process: a list (each folder whole, a ':' in its name included), or one ':'-separated string;
    None: the folder of the installed nvidia-cuda-nvrtc-cu12 wheel, where there is one.

    Calls on one context are serialised by a lock, so its last-error message always belongs to the
    failing call. close() (or leaving a `with` block) also closes the experts and graphs made on it."""

    def __init__(self, device=0, *, cache_dir=None, cache_disable=False, target_arch=None, early_launch=True,
                 nvrtc_dirs=None):
        library = load()
        self.device = device_ordinal(device)
        joined, folders = nvrtc_folders(nvrtc_dirs)
        options = _abi.CtxOptions(device=self.device, cache_dir=c_path(cache_dir, "cache_dir"),
                                  cache_disable=int(bool(cache_disable)), target_arch=c_string(target_arch, "target_arch"),
                                  early_launch_disable=int(not early_launch), nvrtc_dirs=joined,
                                  nvrtc_dir_list=folders, nvrtc_dir_count=len(folders) if folders else 0)
        handle = ctypes.c_void_p()
        check(library.volt8_ctx_create(ctypes.byref(options), ctypes.byref(handle)), "volt8_ctx_create")
        self._handle = handle.value
        self._lock = threading.RLock()
        self._children = weakref.WeakSet()
        self._finalizer = weakref.finalize(self, library.volt8_ctx_destroy, handle.value)

    def __repr__(self):
        if self._handle is None:
            return "<volt8.Context closed>"
        return f"<volt8.Context device={self.device} target_arch={self.target_arch}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Frees the context, after the experts and graphs made on it. Idempotent."""
        for child in list(self._children):
            child.close()
        self._finalizer()
        self._handle = None

    @property
    def closed(self):
        return self._handle is None

    @property
    def handle(self):
        """The raw volt8_ctx pointer as an int."""
        if self._handle is None:
            raise InvalidArgumentError("the volt8.Context is closed")
        return self._handle

    def call(self, function, *args):
        """Calls volt8 `function` (whose errors land in this context) and raises on failure."""
        library = load()
        with self._lock:
            check(getattr(library, function)(*args), function, self.handle)

    def adopt(self, child):
        """Registers an object to close before this context is destroyed."""
        self._children.add(child)

    @property
    def last_error(self):
        """volt8_last_error(ctx): the message of the last failed call on this context."""
        return last_error(self.handle)

    @property
    def target_arch(self):
        """"sm_90", "sm_70"...: the device's arch, or the target_arch given at creation."""
        buffer = ctypes.create_string_buffer(32)
        self.call("volt8_ctx_target_arch", self.handle, buffer, len(buffer))
        return buffer.value.decode()

    @property
    def early_launch(self):
        """True when forwards without a route pass (few tokens) start down and the reduce early, and
        routed forwards an hmma down (sm_90+ kernels, CUDA 12.3+ driver, not disabled by
        early_launch=False or VOLT8_EARLY_LAUNCH_DISABLE=1)."""
        return bool(load().volt8_ctx_early_launch(self.handle))

    @property
    def has_device(self):
        """True when the context holds a usable GPU."""
        try:
            self.require_device()
        except NoDeviceError:
            return False
        return True

    def require_device(self):
        """Raises NoDeviceError (with the reason) unless the context holds a usable GPU."""
        self.call("volt8_ctx_require_device", self.handle)

    # ---- kernel variants (the experimental section of volt8.h: names may change with the variant space) ----

    def variant_names(self, shape=None):
        """The kernel variants the code generator offers for `shape` (a MoeShape; default: the reference shape)."""
        c_shape = (shape or MoeShape()).to_c()
        count = ctypes.c_int32()
        self.call("volt8_variant_count", self.handle, ctypes.byref(c_shape), ctypes.byref(count))
        names = []
        buffer = ctypes.create_string_buffer(256)
        for index in range(count.value):
            self.call("volt8_variant_name", self.handle, ctypes.byref(c_shape), index, buffer, len(buffer))
            names.append(buffer.value.decode())
        return names

    def compile_variant(self, name, shape=None):
        """Generates and compiles (or loads from the disk cache) one variant for this context's target arch;
        returns True when the image came from the cache."""
        c_shape = (shape or MoeShape()).to_c()
        from_cache = ctypes.c_int32()
        self.call("volt8_variant_compile", self.handle, ctypes.byref(c_shape), c_string(name, "name"), ctypes.byref(from_cache))
        return bool(from_cache.value)

    def cache_store_failures(self):
        """(count, reason): kernels compiled on this context that its disk cache did not keep (compiles
        still succeed; later processes compile them again), and why the first was not kept, or why
        there is no disk cache at all."""
        count = ctypes.c_int32()
        buffer = ctypes.create_string_buffer(1024)
        self.call("volt8_cache_store_failures", self.handle, ctypes.byref(count), buffer, len(buffer))
        return count.value, buffer.value.decode("utf-8", "replace")

    def prepare_sampler(self):
        """Compiles (or loads from the cache) the rejection-sampler kernels and, with a GPU, loads them:
        call it before capturing rejection_sample into a CUDA graph."""
        self.call("volt8_rejection_prepare", self.handle)


def tuning_warnings():
    """Warnings of the tuning-table lookup in this process (no table for a shape, a corrupt table skipped)."""
    count = ctypes.c_int32()
    buffer = ctypes.create_string_buffer(1 << 16)
    check(load().volt8_tuning_warnings(buffer, len(buffer), ctypes.byref(count)), "volt8_tuning_warnings")
    return [line for line in buffer.value.decode("utf-8", "replace").split("\n") if line]
