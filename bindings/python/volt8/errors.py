"""Exceptions: one volt8.Error subclass per volt8_status, carrying the status and the library's message."""
import enum


class Status(enum.IntEnum):
    """volt8_status, with the values pinned in volt8.h."""

    OK = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_OUT_OF_MEMORY = 2
    ERR_NO_DEVICE = 3
    ERR_ARCH_UNSUPPORTED = 4
    ERR_COMPILE = 5
    ERR_CACHE = 6
    ERR_IO = 7
    ERR_FORMAT = 8
    ERR_CUDA = 9
    ERR_CODEGEN = 10
    ERR_CAPTURE = 11
    ERR_NOT_FOUND = 12
    ERR_UNSUPPORTED = 13
    ERR_INTERNAL = 14
    ERR_SCALE_RANGE = 15


class Error(Exception):
    """A failed volt8 call. `status` is a Status (or the raw int for a value this binding does not know,
    None for errors of the binding itself); `message` is volt8_last_error's text (or the binding's)."""

    default_status = None

    def __init__(self, message, status=None, function=None):
        self.status = self.default_status if status is None else status
        self.message = message
        self.function = function
        super().__init__(message)

    def __str__(self):
        name = f"VOLT8_{self.status.name}" if isinstance(self.status, Status) else self.status
        prefix = f"{self.function}: " if self.function and not self.message.startswith(self.function) else ""
        return f"{prefix}{self.message} [{name}]" if name is not None else prefix + self.message


class LibraryError(Error):
    """libvolt8 could not be found or loaded, or its version does not fit this binding."""


class InvalidArgumentError(Error, ValueError):
    """VOLT8_ERR_INVALID_ARGUMENT; also raised by the binding's own checks before a call."""

    default_status = Status.ERR_INVALID_ARGUMENT

    def __init__(self, message, status=None, function=None, result=None):
        super().__init__(message, status, function)
        self.result = result  # rejection_sample: the sampled batch, when only some requests were invalid


class OutOfMemoryError(Error, MemoryError):
    default_status = Status.ERR_OUT_OF_MEMORY


class NoDeviceError(Error):
    default_status = Status.ERR_NO_DEVICE


class ArchUnsupportedError(Error):
    default_status = Status.ERR_ARCH_UNSUPPORTED


class CompileError(Error):
    default_status = Status.ERR_COMPILE


class CacheError(Error):
    default_status = Status.ERR_CACHE


class InputOutputError(Error):
    default_status = Status.ERR_IO


class FormatError(Error):
    default_status = Status.ERR_FORMAT


class CudaError(Error):
    default_status = Status.ERR_CUDA


class CodegenError(Error):
    default_status = Status.ERR_CODEGEN


class CaptureError(Error):
    default_status = Status.ERR_CAPTURE


class NotFoundError(Error):
    default_status = Status.ERR_NOT_FOUND


class UnsupportedError(Error):
    default_status = Status.ERR_UNSUPPORTED


class InternalError(Error):
    default_status = Status.ERR_INTERNAL


class ScaleRangeError(Error):
    default_status = Status.ERR_SCALE_RANGE


ERROR_CLASSES = {cls.default_status: cls for cls in (
    InvalidArgumentError, OutOfMemoryError, NoDeviceError, ArchUnsupportedError, CompileError, CacheError,
    InputOutputError, FormatError, CudaError, CodegenError, CaptureError, NotFoundError, UnsupportedError,
    InternalError, ScaleRangeError)}


def error_for_status(status, message, function=None):
    """The exception for a non-OK status value (an unknown value gives a plain Error)."""
    try:
        status = Status(status)
    except ValueError:
        return Error(message, status, function)
    return ERROR_CLASSES.get(status, Error)(message, status, function)
