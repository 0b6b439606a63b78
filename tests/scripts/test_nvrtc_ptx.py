"""bench/probes/nvrtc_ptx.py (the compute_70 PTX of the mma peak probe) on tiny sources; skipped
where no NVRTC 12 loads."""
import ctypes
import os
import stat
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "probes", "nvrtc_ptx.py")


def nvrtc_loads():
    for folder in filter(None, os.environ.get("VOLT8_NVRTC_DIRS", "").split(":")):
        try:
            ctypes.CDLL(os.path.join(folder, "libnvrtc.so.12"))
            return True
        except OSError:
            pass
    try:
        ctypes.CDLL("libnvrtc.so.12")
        return True
    except OSError:
        return False


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=60)


def test_bad_arguments_name_what_is_wrong(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text('extern "C" __global__ void k(int *p) { *p = 1; }\n')
    result = run(source, "sm_70", tmp_path / "k.ptx")
    assert result.returncode == 2 and "ARCH 'sm_70' is not a virtual arch" in result.stderr
    result = run(tmp_path / "missing.cu", "compute_70", tmp_path / "k.ptx")
    assert result.returncode == 2 and "missing.cu is not a regular file" in result.stderr
    assert run(source, "compute_70").returncode == 2
    assert not (tmp_path / "k.ptx").exists()


def test_fifo_source_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "source.cu"
    os.mkfifo(fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    result = run(fifo, "compute_70", tmp_path / "k.ptx")
    assert result.returncode == 2 and "is not a regular file" in result.stderr


@pytest.mark.skipif(not nvrtc_loads(), reason="no NVRTC 12 (VOLT8_NVRTC_DIRS or the loader's path)")
def test_compute_70_ptx_and_a_failed_compile(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text('extern "C" __global__ void probe_kernel(int *p) { *p = 7; }\n')
    out = tmp_path / "k.ptx"
    result = run(source, "compute_70", out)
    assert result.returncode == 0, result.stderr
    ptx = out.read_text()
    assert ".target sm_70" in ptx and ".entry probe_kernel" in ptx
    source.write_text('extern "C" __global__ void probe_kernel(int *p) { *p = 7 }\n')
    out.unlink()
    result = run(source, "compute_70", out)
    assert result.returncode == 1 and "did not compile" in result.stderr and "error" in result.stderr
    assert not out.exists()
