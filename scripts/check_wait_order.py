#!/usr/bin/env python3
"""Checks, in the machine code, where the kernels of a kernel cache that can start early (block_m 1
GEMMs, every hmma down, the token-fused down and the reduce: early launch, sm_90 and later) wait
for the kernel before them. The source orders the loads around griddepcontrol.wait, but the
assembler may move loads it believes read-only across it, so the check is made on the SASS:

  1. each such kernel has its main wait: an ACQBULK followed by the PREEXIT of
     griddepcontrol.launch_dependents;
  2. no load of what the kernel before wrote (h, z: ld.global.cg, SASS LDG...STRONG.GPU) comes
     before that wait;
  3. down and reduce read no 64- or 128-bit vector through the read-only path (h and z would be
     stale there);
  4. block_m 1, hmma and token-fused down kernels request weights (LDG.E.NA.128, or with an L2
     prefetch size LDG.E.NA.LTC128B.128) before the wait;
  5. the reduce requests its token's ids (a 32-bit load, not of produced data) before the wait;
  6. the other kernels (routed gate_up, routed cc and mma down, route), never started early, have no
     wait at all.

usage: check_wait_order.py CACHE_DIR   (a cache filled by `volt8 compile --arch sm_90`)
Needs ptxas and cuobjdump (CUDA toolkit): PTXAS and CUOBJDUMP override the ones on PATH or in
$CUDA_HOME/bin. Exit status 0 when every kernel passes, 1 on a failure, 2 when a tool is missing.
"""
import concurrent.futures
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HEADER_BYTES = 144  # runtime/jit/cache.c: fixed header, then the kernel name, then the image
MAGIC = b"VOLT8KCE"
IMAGE_PTX = 0

# A 128-bit weight load that allocates nothing in L1, with or without an L2 prefetch size.
WEIGHT_LOAD = re.compile(r"LDG\.E\.NA(\.LTC\d+B)?\.128")


def tool(name):
    explicit = os.environ.get(name.upper())
    if explicit:
        return explicit
    found = shutil.which(name)
    if found:
        return found
    candidate = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", name)
    return candidate if os.access(candidate, os.X_OK) else None


def cached_ptx(cache_dir):
    """(kernel name, PTX text) of every sm_90+ PTX entry in the cache."""
    for root, _, files in os.walk(cache_dir):
        for file_name in files:
            with open(os.path.join(root, file_name), "rb") as entry:
                data = entry.read()
            if len(data) < HEADER_BYTES or data[:8] != MAGIC:
                continue
            kind, arch, name_bytes = struct.unpack_from("<III", data, 12)
            (payload_bytes,) = struct.unpack_from("<Q", data, 24)
            if kind != IMAGE_PTX or arch < 90:
                continue
            name = data[HEADER_BYTES:HEADER_BYTES + name_bytes].decode()
            payload = data[HEADER_BYTES + name_bytes:HEADER_BYTES + name_bytes + payload_bytes]
            yield name, payload.rstrip(b"\0").decode(), arch


def sass_lines(ptxas, cuobjdump, ptx, arch, work):
    source = os.path.join(work, "kernel.ptx")
    cubin = os.path.join(work, "kernel.cubin")
    with open(source, "w") as out:
        out.write(ptx)
    subprocess.run([ptxas, f"-arch=sm_{arch}", source, "-o", cubin], check=True, capture_output=True)
    dump = subprocess.run([cuobjdump, "-sass", cubin], check=True, capture_output=True, text=True).stdout
    return [line for line in dump.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]


def problems(name, lines):
    if not re.match(r"volt8_(gate_up|down|reduce|route)", name):
        return []
    if not re.match(r"volt8_(\w+_bm1_|down_tok_|down_hmma_|reduce_)", name):
        return ["a kernel that never starts early has a wait"] if any("ACQBULK" in line for line in lines) else []
    main = None
    last_wait = None
    for index, line in enumerate(lines):
        if "ACQBULK" in line:
            last_wait = index
        elif "PREEXIT" in line:
            main = last_wait
            break
    if main is None:
        return ["no griddepcontrol.wait before griddepcontrol.launch_dependents"]
    found = []
    before = [line for line in lines[:main] if "LDG" in line]
    produced = [line for line in before if "STRONG" in line]
    if produced:
        found.append(f"{len(produced)} load(s) of produced data before the wait: {produced[0].strip()}")
    if name.startswith("volt8_down") or name.startswith("volt8_reduce"):
        read_only_vectors = [line for line in lines if "LDG" in line and re.search(r"\.(64|128)\.CONSTANT", line)
                             and ".NA." not in line]
        if read_only_vectors:
            found.append(f"h or z read through the read-only path: {read_only_vectors[0].strip()}")
    if re.match(r"volt8_down_(tok_|hmma_|\w+_bm1_)", name) and not any(WEIGHT_LOAD.search(line) for line in before):
        found.append("no weight load before the wait")
    if name.startswith("volt8_reduce") and not any(re.search(r"LDG\.E(\.CONSTANT)? ", line) for line in before):
        found.append("no id load before the wait")
    return found


def main():
    if len(sys.argv) != 2:
        print("usage: check_wait_order.py CACHE_DIR", file=sys.stderr)
        return 2
    ptxas, cuobjdump = tool("ptxas"), tool("cuobjdump")
    if not ptxas or not cuobjdump:
        print("check_wait_order: needs ptxas and cuobjdump (set PTXAS / CUOBJDUMP or CUDA_HOME)", file=sys.stderr)
        return 2
    def check(entry):
        name, ptx, arch = entry
        with tempfile.TemporaryDirectory() as work:
            return name, arch, problems(name, sass_lines(ptxas, cuobjdump, ptx, arch, work))

    checked, failed = 0, 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for name, arch, found in pool.map(check, sorted(cached_ptx(sys.argv[1]))):
            checked += 1
            for problem in found:
                print(f"{name} (sm_{arch}): {problem}")
            failed += bool(found)
    print(f"check_wait_order: {checked} kernels, {failed} failed")
    return 1 if failed or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
