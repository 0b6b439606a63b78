#!/usr/bin/env python3
"""Compile one CUDA source file to PTX with NVRTC 12 (the last NVRTC that targets compute_70; CUDA
13's nvcc does not), for the probes whose kernels must run as compute_70 code.

    nvrtc_ptx.py SOURCE ARCH OUT      e.g. bench/probes/mma_peak_sm70.cuh compute_70 mma_peak_sm70.ptx

libnvrtc.so.12 is looked for in $VOLT8_NVRTC_DIRS (colon-separated; scripts/venv_nvrtc.sh sets it to
the project's .venv copy), then by the loader's own search. Exit 1 with NVRTC's log on a failed
compile, 2 on bad arguments (SOURCE not a regular file, ARCH not compute_NN).
"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import regular_file  # noqa: E402


def load_nvrtc():
    tried = []
    for folder in filter(None, os.environ.get("VOLT8_NVRTC_DIRS", "").split(":")):
        path = os.path.join(folder, "libnvrtc.so.12")
        try:
            return ctypes.CDLL(path)
        except OSError as error:
            tried.append(f"{path}: {error}")
    try:
        return ctypes.CDLL("libnvrtc.so.12")
    except OSError as error:
        tried.append(f"libnvrtc.so.12: {error}")
    sys.exit("nvrtc_ptx: no NVRTC 12 (" + "; ".join(tried) + ")")


def main(argv):
    if len(argv) != 4:
        print("usage: nvrtc_ptx.py SOURCE ARCH OUT", file=sys.stderr)
        return 2
    source_path, arch, out_path = argv[1:]
    if not arch.startswith("compute_"):
        print(f"nvrtc_ptx: ARCH {arch!r} is not a virtual arch (compute_NN)", file=sys.stderr)
        return 2
    text, problem = regular_file.read_text(source_path)
    if problem:
        print(f"nvrtc_ptx: SOURCE: {problem}", file=sys.stderr)
        return 2
    source = text.encode()
    nvrtc = load_nvrtc()
    program = ctypes.c_void_p()

    def check(result, what):
        if result != 0:
            sys.exit(f"nvrtc_ptx: {what} failed ({result})")

    check(nvrtc.nvrtcCreateProgram(ctypes.byref(program), source, os.path.basename(source_path).encode(), 0, None, None),
          "nvrtcCreateProgram")
    options = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", b"-lineinfo"]
    option_array = (ctypes.c_char_p * len(options))(*options)
    compiled = nvrtc.nvrtcCompileProgram(program, len(options), option_array)
    log_size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(log_size))
    log = ctypes.create_string_buffer(log_size.value)
    nvrtc.nvrtcGetProgramLog(program, log)
    if compiled != 0:
        print(f"nvrtc_ptx: {source_path} for {arch} did not compile:\n{log.value.decode(errors='replace')}",
              file=sys.stderr)
        return 1
    ptx_size = ctypes.c_size_t()
    check(nvrtc.nvrtcGetPTXSize(program, ctypes.byref(ptx_size)), "nvrtcGetPTXSize")
    ptx = ctypes.create_string_buffer(ptx_size.value)
    check(nvrtc.nvrtcGetPTX(program, ptx), "nvrtcGetPTX")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(program))
    temporary = out_path + ".tmp"
    try:
        with open(temporary, "wb") as handle:
            handle.write(ptx.value)
        os.replace(temporary, out_path)
    except OSError as error:
        print(f"nvrtc_ptx: OUT: cannot write {out_path}: {error.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
