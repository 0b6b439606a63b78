"""Finding and loading libvolt8.so.0, checking its version, and turning statuses into exceptions.

Search order: $VOLT8_LIBRARY (a file, or a folder holding libvolt8.so.0), then a copy next to this
package, then the system's loader (LD_LIBRARY_PATH, the ld.so cache, ctypes.util.find_library).
"""
import ctypes
import ctypes.util
import os
import threading

from . import _abi, _elf
from .errors import LibraryError, error_for_status

SONAME = "libvolt8.so.0"
ENVIRONMENT_VARIABLE = "VOLT8_LIBRARY"
# The oldest library this binding works with: same major version, and at least the header it mirrors.
REQUIRED_VERSION = _abi.HEADER_VERSION[:2]

_lock = threading.Lock()
_loaded = None  # (CDLL, path)


def candidates():
    """(how, path-or-name) in search order."""
    found = []
    explicit = os.environ.get(ENVIRONMENT_VARIABLE)
    if explicit:
        found.append((ENVIRONMENT_VARIABLE, os.path.join(explicit, SONAME) if os.path.isdir(explicit) else explicit))
        return found  # an explicit choice is never silently replaced by another copy
    package_dir = os.path.dirname(os.path.abspath(__file__))
    for name in (SONAME, "libvolt8.so"):
        path = os.path.join(package_dir, name)
        if os.path.exists(path):
            found.append(("package", path))
    found.append(("system", SONAME))
    system = ctypes.util.find_library("volt8")
    if system and system != SONAME:
        found.append(("system", system))
    return found


def split_version(number):
    """volt8_version_number() -> (major, minor, patch)."""
    return number // 10000, number // 100 % 100, number % 100


def check_version(number, required=REQUIRED_VERSION):
    """Raises LibraryError unless a library of version `number` serves a binding needing `required`."""
    major, minor, patch = split_version(number)
    if major != required[0] or (major, minor) < tuple(required):
        raise LibraryError(f"libvolt8 {major}.{minor}.{patch} does not fit this binding, which needs "
                           f"{required[0]}.{required[1]} or a newer {required[0]}.x")


def _open(path):
    if os.sep in path and os.path.exists(path) and not os.path.isfile(path):
        # dlopen of a FIFO would block for ever; a folder or device is no library either.
        raise LibraryError(f"{path}: not a regular file")
    reason = _elf.check(path) if os.sep in path and os.path.exists(path) else None
    if reason:  # a truncated copy would kill the interpreter with SIGBUS inside dlopen
        raise LibraryError(f"{path} {reason}")
    try:
        library = ctypes.CDLL(path)
    except OSError as error:
        raise LibraryError(f"{path}: {error}") from None
    try:
        _abi.declare(library)
    except AttributeError as error:
        raise LibraryError(f"{path} lacks a volt8 function: {error}") from None
    check_version(library.volt8_version_number())
    return library


def load():
    """The loaded library (CDLL), loading it on first use."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _load_first()
    return _loaded[0]


def _load_first():
    failures = []
    for how, path in candidates():
        try:
            library = _open(path)
        except LibraryError as error:
            failures.append(f"{how}: {error.message}")
            continue
        return library, _resolve_path(library, path)
    raise LibraryError("libvolt8 not found or not usable (set VOLT8_LIBRARY to its path); tried " + "; ".join(failures))


def _resolve_path(library, fallback):
    """The file the loader picked, through dladdr on one of its symbols."""

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    try:
        libdl = ctypes.CDLL(None)
        dladdr = libdl.dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
        info = DlInfo()
        address = ctypes.cast(library.volt8_version_number, ctypes.c_void_p)
        if dladdr(address, ctypes.byref(info)) and info.dli_fname:
            return os.path.abspath(info.dli_fname.decode())
    except (OSError, AttributeError):
        pass
    return fallback


def library_path():
    """The path of the loaded libvolt8."""
    load()
    return _loaded[1]


def last_error(ctx_handle=None):
    text = load().volt8_last_error(ctx_handle)
    return text.decode("utf-8", "replace") if text else ""


def check(status, function, ctx_handle=None):
    """Raises the Error subclass for a non-OK status, with volt8_last_error's message."""
    if status != 0:
        message = last_error(ctx_handle) or load().volt8_status_string(status).decode()
        raise error_for_status(status, message, function)
