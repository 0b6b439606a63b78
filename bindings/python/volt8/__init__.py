"""volt8: FP8 (E4M3) MoE draft experts on Volta and newer GPUs, from Python.

A ctypes binding over libvolt8.so.0 (no compiled extension). The library is found through
$VOLT8_LIBRARY, next to this package, or through the system's loader, and loaded on first use.
"""
from ._library import library_path
from .checkpoint import HostCheckpoint, expert_range, load_host_checkpoint, plan
from .context import Context, tuning_warnings
from .errors import (ArchUnsupportedError, CacheError, CaptureError, CodegenError, CompileError, CudaError, Error,
                     FormatError, InputOutputError, InternalError, InvalidArgumentError, LibraryError, NoDeviceError,
                     NotFoundError, OutOfMemoryError, ScaleRangeError, Status, UnsupportedError)
from .experts import Experts, Graph
from .reference import reference_moe_forward, relative_l2
from .reports import LoadReport, MemoryReport, PlanReport, RankPlan
from .sampler import RejectionResult, rejection_sample
from .shape import MoeShape

__version__ = "0.4.0"


def library_version():
    """The loaded library's version as a string ("0.4.0")."""
    from ._library import load
    return load().volt8_version_string().decode()


def status_string(status):
    """volt8_status_string: static text naming a status."""
    from ._library import load
    return load().volt8_status_string(int(status)).decode()


__all__ = [
    "ArchUnsupportedError", "CacheError", "CaptureError", "CodegenError", "CompileError", "Context", "CudaError",
    "Error", "Experts", "FormatError", "Graph", "HostCheckpoint", "InputOutputError", "InternalError",
    "InvalidArgumentError", "LibraryError", "LoadReport", "MemoryReport", "MoeShape", "NoDeviceError", "NotFoundError",
    "OutOfMemoryError", "PlanReport", "RankPlan", "RejectionResult", "ScaleRangeError", "Status", "UnsupportedError",
    "expert_range", "library_path", "library_version",
    "load_host_checkpoint", "plan", "reference_moe_forward", "rejection_sample",
    "relative_l2", "status_string", "tuning_warnings",
]
