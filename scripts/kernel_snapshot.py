#!/usr/bin/env python3
"""What the kernels and the dispatch are, written to a folder, so that two builds can be compared with
`diff -r`: a change that means to keep every kernel and every choice leaves the two folders equal.

    scripts/kernel_snapshot.py --out DIR [--volt8 build/volt8] [--lua-tree TREE] [--what sources,choices,ptx]

Shapes: every shape the GPU suites compile for (`scripts/gpu_check.sh shapes`) and each registry
model's TP4 and TP8 ranks with all their experts (`volt8 models --tp N`).

- sources: every variant's generated CUDA source for sm_70 and sm_90, one file per kernel entry
  (DIR/sources/sm_XX/ENTRY.cu). Equal sources give equal PTX from one NVRTC. `volt8 list --sources`
  writes them; --lua-tree TREE takes them from TREE/codegen/gen.lua instead (a tree from before the
  kernel catalogue, whose library ran that generator for every source; today's codegen/gen.lua writes
  the variant space only).
- choices: the dispatch's pair at every M of 1..160 and some larger, top-k 1, 8, 10 and 16, with the
  built-in tables and with a folder of the reference model's tables alone (`volt8 list --choice`,
  `--tables`), per arch (DIR/choices/); a top-k above the shape's experts is left out.
- ptx: the default shape's kernels compiled by `volt8 compile` for sm_70 and sm_90 (NVRTC 12 through
  VOLT8_NVRTC_DIRS), listed by kernel with the SHA-256 of its compiled image (DIR/ptx/): a change of
  the sources' comments alone leaves it equal."""
import argparse
import concurrent.futures
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHES = ("sm_70", "sm_90")
TOP_KS = (1, 8, 10, 16)
TOKEN_COUNTS = list(range(1, 161)) + [192, 256, 320, 384, 512, 768, 1024, 2048, 4096]
CHOICE_BATCH = 64  # `volt8 list --choice` takes at most 64 token counts

LUA_DRIVER = """
local tree, out, arch, shape_text = ...
local gen = dofile(tree .. "/codegen/gen.lua")
local shape = {}
for field, value in shape_text:gmatch("([%w_]+)=([^,]*)") do shape[field] = math.tointeger(tonumber(value)) end
for _, name in ipairs(gen.list(shape, math.tointeger(arch))) do
  local emitted = gen.emit(name, shape, math.tointeger(arch))
  local file = assert(io.open(out .. "/" .. emitted.entry .. ".cu", "wb"))
  file:write(emitted.source)
  file:close()
end
"""


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(command), result.returncode, result.stderr.strip()))
    return result.stdout


def shapes(volt8):
    found = run([os.path.join(ROOT, "scripts", "gpu_check.sh"), "shapes", volt8]).split()
    for tp in (4, 8):
        found += [line.split()[3] for line in run([volt8, "models", "--tp", str(tp)]).splitlines()]
    return list(dict.fromkeys(found))


def sources(volt8, lua_tree, shape, arch, out):
    if lua_tree:
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as driver:
            driver.write(LUA_DRIVER)
        try:
            run(["lua5.4", driver.name, os.path.abspath(lua_tree), out, arch[3:], shape])
        finally:
            os.unlink(driver.name)
    else:
        run([volt8, "list", "--arch", arch, "--shape", shape, "--sources", out])


def model_experts(shape):
    """The model's expert count of a --shape text (global_experts, else num_experts, else 512)."""
    fields = dict(item.split("=") for item in shape.split(",") if item)
    return int(fields.get("global_experts", 0)) or int(fields.get("num_experts", 512))


def choices(volt8, shape, arch, tables):
    lines = []
    for top_k in (k for k in TOP_KS if k <= model_experts(shape)):  # a token's experts are distinct
        for start in range(0, len(TOKEN_COUNTS), CHOICE_BATCH):
            batch = TOKEN_COUNTS[start:start + CHOICE_BATCH]
            command = [volt8, "list", "--arch", arch, "--shape", shape, "--top-k", str(top_k), "--choice",
                       ",".join(map(str, batch))] + (["--tables", tables] if tables else [])
            lines += ["%s top_k=%d %s" % (shape, top_k, line) for line in run(command).splitlines()]
    return lines


def reference_tables(into):
    """The reference model's tables (hidden 2560), as a --tables folder: its own tables from the folder,
    every other shape the nearest of them."""
    folder = os.path.join(ROOT, "tuning", "tables")
    for name in sorted(os.listdir(folder)):
        if ",N=2560," in name or ",K=2560," in name:
            shutil.copy(os.path.join(folder, name), into)


ENTRY_HEADER_BYTES = 144  # docs/design.md, "Kernel cache": the entry's header, then its kernel name, then the image


def ptx(volt8, arch, out):
    """"KERNEL SHA-256" of each compiled image (the PTX itself, whatever the source's comments)."""
    cache = os.path.join(out, "cache_" + arch)
    run([volt8, "compile", "--arch", arch, "--cache", cache])
    listing = []
    for folder, _, files in os.walk(cache):
        for name in files:
            if name.endswith(".entry"):
                with open(os.path.join(folder, name), "rb") as entry:
                    data = entry.read()
                name_bytes = int.from_bytes(data[20:24], "little")
                image_bytes = int.from_bytes(data[24:32], "little")
                kernel = data[ENTRY_HEADER_BYTES:ENTRY_HEADER_BYTES + name_bytes].decode()
                image = data[ENTRY_HEADER_BYTES + name_bytes:ENTRY_HEADER_BYTES + name_bytes + image_bytes]
                listing.append("%s %s" % (kernel, hashlib.sha256(image).hexdigest()))
    shutil.rmtree(cache)
    return sorted(listing)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--volt8", default=os.path.join(ROOT, "build", "volt8"))
    parser.add_argument("--lua-tree")
    parser.add_argument("--what", default="sources,choices,ptx")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    what = set(args.what.split(","))
    if what - {"sources", "choices", "ptx"}:
        parser.error("--what: %s is not one of sources, choices, ptx" % args.what)
    volt8 = os.path.abspath(args.volt8)
    shape_list = shapes(volt8)
    os.makedirs(args.out, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        if "sources" in what:
            jobs = []
            for arch in ARCHES:
                folder = os.path.join(args.out, "sources", arch)
                os.makedirs(folder, exist_ok=True)
                jobs += [pool.submit(sources, volt8, args.lua_tree, shape, arch, folder) for shape in shape_list]
            for job in jobs:
                job.result()
        if "choices" in what:
            os.makedirs(os.path.join(args.out, "choices"), exist_ok=True)
            with tempfile.TemporaryDirectory() as tables:
                reference_tables(tables)
                for arch in ARCHES:
                    for suffix, folder in (("", None), (".reference_tables", tables)):
                        jobs = [pool.submit(choices, volt8, shape, arch, folder) for shape in shape_list]
                        with open(os.path.join(args.out, "choices", arch + suffix + ".txt"), "w") as out:
                            for job in jobs:
                                out.write("".join(line + "\n" for line in job.result()))
        if "ptx" in what:
            os.makedirs(os.path.join(args.out, "ptx"), exist_ok=True)
            for arch in ARCHES:
                with open(os.path.join(args.out, "ptx", arch + ".txt"), "w") as out:
                    out.write("".join(line + "\n" for line in ptx(volt8, arch, args.out)))
    print("kernel_snapshot: %d shapes into %s" % (len(shape_list), args.out))


if __name__ == "__main__":
    sys.exit(main())
