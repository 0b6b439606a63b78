#!/usr/bin/env python3
"""A V100 on paper at large M (issue 36, item 4): for each registry model at TP4 and TP8 (rank 0) and
M = 256..16384, the sm_70 dispatch's pair, the derivation model's V100 time and what bounds each kernel
(`volt8 list --arch sm_70 --choice ... --explain --json`), then the sm_70 CUBIN resources of the tile
variants and of the mma variants the dispatch picks (`volt8 list --arch sm_70 --resources --json`) and
the share of HMMA in the inner loop of their SASS, where a disassembler here reads sm_70.

    scripts/v100_paper.py [--volt8 build/volt8] [--jobs 2] [--cuobjdump PATH]... > docs/v100_large_m.md

No GPU. The SASS: each variant's generated source (`volt8 list --sources`) compiled to an sm_70 CUBIN by
the NVRTC 12 that VOLT8_NVRTC_DIRS names (else the project's .venv's), listed by `cuobjdump -sass`
(the --cuobjdump given, else one on PATH or in /usr/local/cuda/bin); the inner loop is the shortest
backward branch's body that holds HMMA (scripts/sass_mix.py), or, where K takes so few steps that no
loop holds one, the whole kernel, said so. CUDA 13.1 and later refuse sm_70 code; where no candidate
reads it, the table says so and gives no figure. The cuobjdump of CUDA 12.8 that the triton 3.6 wheel
carries (triton/backends/nvidia/bin/cuobjdump) reads it."""
import argparse
import ctypes
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_mix  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M_VALUES = (256, 512, 1024, 2048, 4096, 8192, 16384)
TP_SIZES = (4, 8)
BYTES = {"DRAM", "L2"}
PEAK_M = (2048, 16384)
V100_TENSOR_PEAK = 125.0  # TFLOP/s, m8n8k4 (V100-SXM2)


def nvrtc_dirs():
    """The folders VOLT8_NVRTC_DIRS names, else the project's .venv's NVRTC 12 (scripts/venv_nvrtc.sh)."""
    given = os.environ.get("VOLT8_NVRTC_DIRS")
    if given:
        return [d for d in given.split(":") if d]
    return glob.glob(os.path.join(ROOT, ".venv/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib"))


def run_volt8(volt8, args, env):
    result = subprocess.run([volt8, *args], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{volt8} {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def rank_shapes(volt8, env):
    """[(model, tp, shape text)] of rank 0 at each TP size, in `volt8 models` order, and the models a TP
    size does not split, with why."""
    models = [line.split()[0] for line in run_volt8(volt8, ["models"], env).splitlines() if line.strip()]
    shapes, unsplit = [], []
    for tp in TP_SIZES:
        result = subprocess.run([volt8, "models", "--tp", str(tp)], capture_output=True, text=True, env=env)
        ranks = {}
        for line in result.stdout.splitlines():
            words = line.split()
            if len(words) == 4 and words[1] == f"tp={tp}" and words[2] == "rank=0":
                ranks[words[0]] = words[3]
        for model in models:
            if model in ranks:
                shapes.append((model, tp, ranks[model]))
            else:
                unsplit.append((model, tp, result.stderr.strip()))
    return shapes, unsplit


def family(variant):
    """"tile bm64" of gate_up.tile.bm64.bn64.w8.sk1.o2."""
    parts = variant.split(".")
    return f"{parts[1]} {parts[2]}"


def bound_word(kernel):
    """The model's word for what bounds a kernel, bytes marked as such."""
    limit = kernel["limited_by"]
    return f"bytes ({limit})" if limit in BYTES else limit


def forward_tables(accounts):
    """Markdown: the dispatch's pair, then the model's time and each kernel's bound, a row per rank."""
    head = "| model, TP (rank 0) | " + " | ".join(f"M = {m}" for m in M_VALUES) + " |\n"
    rule = "|---|" + "---|" * len(M_VALUES) + "\n"
    choices = ["The sm_70 dispatch's pair (gate_up / down; the variants' full names in the table below):\n\n",
               head, rule]
    times = ["The model's V100 forward time (route and reduce included) and what bounds gate_up / down:\n\n",
             head, rule]
    for (model, tp, _), account in accounts:
        by_m = {forward["m"]: forward for forward in account["forwards"]}
        label = f"{model} TP{tp}"
        choices.append(f"| {label} | " + " | ".join(
            f"{family(by_m[m]['gate_up']['variant'])} / {family(by_m[m]['down']['variant'])}" for m in M_VALUES) + " |\n")
        times.append(f"| {label} | " + " | ".join(
            f"{by_m[m]['forward_us'] / 1e3:.2f} ms: {bound_word(by_m[m]['gate_up'])} / {bound_word(by_m[m]['down'])}"
            for m in M_VALUES) + " |\n")
    return "".join(choices) + "\n" + "".join(times)


def peak_table(accounts):
    """Markdown: at PEAK_M, each rank's FLOPs, the model's time against the time of those FLOPs at the V100's
    125 TFLOP/s m8n8k4 peak, and what bounds gate_up / down."""
    rows = [f"Against the V100's {V100_TENSOR_PEAK:g} TFLOP/s tensor peak (m8n8k4), the forward's FLOPs (2 x M x "
            "top-k x 3 x hidden x the rank's intermediate: gate_up, then down) over the model's time:\n\n",
            "| model, TP (rank 0) | M | TFLOP | model's time | at the peak | TFLOP/s (% of peak) | bound (gate_up / down) |\n",
            "|---|---|---|---|---|---|---|\n"]
    for (model, tp, shape), account in accounts:
        fields = dict(part.split("=") for part in shape.split(","))
        by_m = {forward["m"]: forward for forward in account["forwards"]}
        for m in PEAK_M:
            forward = by_m[m]
            flop = 6.0 * m * account["top_k"] * int(fields["hidden"]) * int(fields["intermediate"])
            seconds = forward["forward_us"] * 1e-6
            rate = flop / seconds / 1e12
            rows.append(f"| {model} TP{tp} | {m} | {flop / 1e12:.2f} | {seconds * 1e3:.2f} ms | "
                        f"{flop / (V100_TENSOR_PEAK * 1e12) * 1e3:.2f} ms | {rate:.1f} ({100 * rate / V100_TENSOR_PEAK:.0f}%) | "
                        f"{bound_word(forward['gate_up'])} / {bound_word(forward['down'])} |\n")
    return "".join(rows)


def hmma_share(listing_text):
    """(HMMA instructions, instructions, in a loop) of a `cuobjdump -sass` listing's inner loop: the
    shortest loop that holds HMMA. Where no loop holds one (K takes so few steps that the compiler
    unrolled them all), of the whole kernel, the third item False. None without HMMA."""
    listing = sass_mix.instructions(listing_text)
    with_hmma = [(span, counts) for span in sass_mix.loops(listing)
                 for counts in [sass_mix.mix(listing, span)] if counts.get("HMMA", 0)]
    if with_hmma:
        _, counts = min(with_hmma, key=lambda item: item[0][1] - item[0][0])
        return counts["HMMA"], sum(counts.values()), True
    counts = sass_mix.mix(listing, (0, len(listing) - 1))
    if not counts.get("HMMA", 0):
        return None
    return counts["HMMA"], sum(counts.values()), False


def variant_rows(picked, resources, shares):
    """Markdown rows of the tile variants of each rank and the mma variants its dispatch picks."""
    rows = ["| model, TP (rank 0) | variant | registers | spills (bytes st/ld) | CTAs / SM | warps / SM | limited by "
            "| HMMA share of the inner loop's SASS |\n|---|---|---|---|---|---|---|---|\n"]
    for (model, tp, shape), report in resources:
        for variant in report["variants"]:
            name = variant["variant"]
            kind = (name.split(".") + [""])[1]  # route and reduce have no family
            if kind != "tile" and not (kind == "mma" and (shape, name) in picked):
                continue
            mark = " (picked)" if (shape, name) in picked else ""
            rows.append(f"| {model} TP{tp} | `{name}`{mark} | {variant['registers']} | "
                        f"{variant['spill_store_bytes']}/{variant['spill_load_bytes']} | {variant['ctas_per_sm']} | "
                        f"{variant['warps_per_sm']} | {variant['limited_by']} | {shares.get((shape, name), 'not measured')} |\n")
    return "".join(rows)


def nvrtc_cubin(library, source, name):
    """An sm_70 CUBIN of `source` with NVRTC (the options the library's resource report uses)."""
    program = ctypes.c_void_p()
    if library.nvrtcCreateProgram(ctypes.byref(program), source, name.encode(), 0, None, None) != 0:
        raise RuntimeError(f"NVRTC could not take the source of {name}")
    options = [b"--gpu-architecture=sm_70", b"-default-device"]
    try:
        if library.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options)) != 0:
            raise RuntimeError(f"NVRTC could not compile {name} for sm_70")
        size = ctypes.c_size_t()
        library.nvrtcGetCUBINSize(program, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        library.nvrtcGetCUBIN(program, cubin)
        return cubin.raw
    finally:
        library.nvrtcDestroyProgram(ctypes.byref(program))


def load_nvrtc12():
    for folder in nvrtc_dirs():
        path = os.path.join(folder, "libnvrtc.so.12")
        if os.path.isfile(path):
            return ctypes.CDLL(path), path
    return None, "no libnvrtc.so.12 in VOLT8_NVRTC_DIRS or the project's .venv"


def disassembler_candidates(given):
    if given:
        return given
    found = [shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"]
    return [path for path in dict.fromkeys(found) if path and os.path.isfile(path)]


def listing_of(tool, cubin_path):
    """(SASS listing, None) or (None, why the tool gave none)."""
    try:
        result = subprocess.run([tool, "-sass", cubin_path], capture_output=True, text=True, timeout=120)
    except OSError as error:
        return None, f"{tool}: {error.strerror}"
    if result.returncode == 0 and not sass_mix.instructions(result.stdout):
        return None, f"{tool}: printed no instructions"
    if result.returncode != 0:
        why = (result.stderr.strip() or f"exit {result.returncode}").splitlines()[0]
        return None, f"{tool}: {why}"
    return result.stdout, None


def sass_shares(volt8, env, wanted, tools):
    """{(shape, variant): "h of n (p%)"} for `wanted`, and a note saying where the figures come from or
    why there are none."""
    if not tools:
        return {}, ("not measured: no cuobjdump here (none given, none on PATH or in /usr/local/cuda/bin); the "
                    "cuobjdump and nvdisasm of CUDA 13.1 and later refuse sm_70 code (\"SM70 is deprecated\"), and the "
                    "nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm packages start at 13.2, so one of CUDA 13.0 or "
                    "older is needed (--cuobjdump PATH)")
    library, where = load_nvrtc12()
    if library is None:
        return {}, f"no sm_70 CUBIN: {where}"
    shares, refusals, used = {}, [], None
    with tempfile.TemporaryDirectory() as scratch:
        for shape, entries in wanted.items():
            folder = os.path.join(scratch, str(len(os.listdir(scratch))))
            os.mkdir(folder)
            run_volt8(volt8, ["list", "--arch", "sm_70", "--shape", shape, "--sources", folder], env)
            for name in entries:
                prefix = "volt8_" + name.replace(".", "_") + "__"
                sources = [f for f in os.listdir(folder) if f.startswith(prefix)]
                with open(os.path.join(folder, sources[0]), "rb") as stream:
                    cubin = nvrtc_cubin(library, stream.read(), name)
                cubin_path = os.path.join(scratch, "k.cubin")
                with open(cubin_path, "wb") as stream:
                    stream.write(cubin)
                for tool in ([used] if used else tools):
                    listing, why = listing_of(tool, cubin_path)
                    if listing is not None:
                        used = tool
                        break
                    refusals.append(why)
                if not used:
                    return {}, "not measured: no disassembler here reads sm_70 CUBINs: " + "; ".join(
                        dict.fromkeys(refusals))
                share = hmma_share(listing)
                shares[(shape, name)] = "no HMMA" if share is None else \
                    f"{share[0]} of {share[1]} ({100.0 * share[0] / share[1]:.0f}%)" + \
                    ("" if share[2] else ", the whole kernel (its K steps unrolled, no loop)")
    return shares, f"SASS of {os.path.basename(where)}'s sm_70 CUBINs, listed by {tool_identity(used)}"


def tool_identity(tool):
    """`the cuobjdump of CUDA 12.8` from the tool's --version, else its file name: the document names no
    folder of the machine that made it."""
    try:
        text = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        text = ""
    release = re.search(r"release (\d+\.\d+)", text)
    name = os.path.basename(tool)
    return f"the {name} of CUDA {release.group(1)}" if release else name


def shown_argument(before, arg):
    """An argument of the command as the document shows it: no folder of the machine that made it (the
    SASS note names the disassembler by its release; the volt8 binary relative to the checkout)."""
    if before == "--cuobjdump":
        return "CUOBJDUMP"
    if arg.startswith("--cuobjdump="):
        return "--cuobjdump=CUOBJDUMP"
    if before == "--volt8" and arg.startswith(ROOT + os.sep):
        return os.path.relpath(arg, ROOT)
    return arg


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--volt8", default=os.path.join(ROOT, "build", "volt8"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cuobjdump", action="append", default=[], metavar="PATH")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.jobs > 64:
        parser.error(f"--jobs {args.jobs}: needs 1..64")
    for path in [args.volt8, *args.cuobjdump]:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            parser.error(f"{path} is not an executable file")
    env = dict(os.environ)
    if not env.get("VOLT8_NVRTC_DIRS"):
        env["VOLT8_NVRTC_DIRS"] = ":".join(nvrtc_dirs())
    try:
        shapes, unsplit = rank_shapes(args.volt8, env)
        m_text = ",".join(str(m) for m in M_VALUES)
        accounts, resources, picked = [], [], set()
        for model, tp, shape in shapes:
            common = ["list", "--arch", "sm_70", "--model", model, "--tp", str(tp), "--rank", "0"]
            account = json.loads(run_volt8(args.volt8, [*common, "--choice", m_text, "--explain", "--json", "--jobs",
                                                        str(args.jobs)], env))
            accounts.append(((model, tp, shape), account))
            resources.append(((model, tp, shape), json.loads(run_volt8(
                args.volt8, [*common, "--resources", "--json", "--jobs", str(args.jobs)], env))))
            for forward in account["forwards"]:
                picked.update((shape, forward[op]["variant"]) for op in ("gate_up", "down"))
        wanted = {}
        for (_, _, shape), report in resources:
            for variant in report["variants"]:
                name = variant["variant"]
                if ".tile." in name or (".mma." in name and (shape, name) in picked):
                    wanted.setdefault(shape, []).append(name)
        shares, sass_note = sass_shares(args.volt8, env, wanted, disassembler_candidates(args.cuobjdump))
    except (RuntimeError, ValueError) as error:
        print(f"v100_paper: {error}", file=sys.stderr)
        return 1
    command = "scripts/v100_paper.py" + "".join(
        f" {shown_argument(before, arg)}" for before, arg in zip([None, *argv], argv))
    out = [f"# A V100 on paper at large M\n\n",
           f"Made {datetime.date.today().isoformat()} by `{command}` (no GPU: every figure is the derivation model's, "
           f"`tuning/derive_model.h`, or an sm_70 CUBIN's). Rank 0 of each model at TP4 and TP8 (`volt8 models --tp "
           f"N`), its registry top-k; M tokens.\n\n",
           "Bounds (`volt8 list --explain`): `bytes (DRAM)` or `bytes (L2)`; `m8n8k4 issue` (tensor cores at the "
           "V100's 125 TFLOP/s peak for the tile family, at 40 TFLOP/s for the mma family's small tiles); `dequant` "
           "(E4M3 -> FP16 conversions); `FP32 issue` (CUDA cores); `latency` (too few warps resident to keep DRAM "
           "busy).\n\n",
           forward_tables(accounts), "\n", peak_table(accounts), "\n"]
    for model, tp, why in unsplit:
        out.append(f"{model} at TP{tp}: not split ({why}).\n\n")
    out.append("The sm_70 CUBINs (NVRTC " + (resources[0][1]["nvrtc_version"] if resources else "?") +
               ", `ptxas -v`) of every tile variant of each rank and of the mma variants its dispatch picks above "
               "(picked: the dispatch's at some M above). HMMA share: " + sass_note + ".\n\n")
    out.append(variant_rows(picked, resources, shares))
    sys.stdout.write("".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
