"""Where the NVRTC that pip installs lives, handed to the C library as volt8_ctx_options.nvrtc_dir_list.

NVRTC 12 (the `nvidia-cuda-nvrtc-cu12` wheel) is the last NVRTC that compiles for compute_70, so the
binding names its folder; the C library still tries $VOLT8_NVRTC and an NVRTC already loaded in the
process first, and the system loader and the CUDA toolkit after (include/volt8.h, nvrtc_dirs).
"""
import functools
import importlib.util
import os

WHEEL_PACKAGES = ("nvidia.cuda_nvrtc", "nvidia.cu13")
SONAMES = ("libnvrtc.so.12", "libnvrtc.so.13")


def _package_folders(name):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return list(spec.submodule_search_locations or [])


def _pathfinder_folders():
    """The folder cuda-pathfinder (where installed) finds for nvrtc, without loading it here (it asks a
    subprocess, so it is asked only when no wheel folder was found, and once per process)."""
    try:
        from cuda.pathfinder import find_nvidia_dynamic_lib  # type: ignore
    except ImportError:
        return []
    try:
        found = find_nvidia_dynamic_lib("nvrtc")
    except Exception:  # noqa: BLE001 - an optional helper's failure only removes one candidate
        return []
    return [os.path.dirname(found)] if isinstance(found, str) and found else []


def wheel_folders():
    """Folders holding a pip-installed libnvrtc.so.12/.13, in search order, without duplicates."""
    return list(_wheel_folders())


@functools.lru_cache(maxsize=1)
def _wheel_folders():
    """wheel_folders, looked up once per process (cuda-pathfinder asks a subprocess)."""
    folders = [os.path.join(root, "lib") for package in WHEEL_PACKAGES for root in _package_folders(package)]
    found = _existing(folders)
    return tuple(found or _existing(_pathfinder_folders()))


def _existing(folders):
    found = []
    for folder in folders:
        real = os.path.realpath(folder)
        if real not in found and any(os.path.exists(os.path.join(real, soname)) for soname in SONAMES):
            found.append(real)
    return found

