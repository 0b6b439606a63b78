#!/usr/bin/env python3
"""The instruction mix of a kernel's weight loops, per converted weight code, from its SASS.

    scripts/sass_mix.py KERNEL.sass [--loops 1] [--codes N]
    scripts/sass_mix.py --ptx-from CACHE_DIR --kernel NAME > NAME.ptx

KERNEL.sass: `cuobjdump -sass` of a CUBIN (the compute_70 PTX of a `cc`, `tok` or one-launch
kernel assembled for a GPU, e.g. `ptxas -arch=sm_90 K.ptx -o K.cubin`, or for a V100 with the ptxas
of CUDA 12, whose cuobjdump and nvdisasm 12 or older are needed to read it: 13 refuses sm_70). A loop
is a backward branch and the instructions it jumps over; the longest ones are reported (in an
unrolled weight loop, the body). From sm_70 on the assembler turns each FP16 -> FP32 conversion of
the bit-level E4M3 decode into one `HADD2.F32`, one per weight code, so the loop's instructions over its
`HADD2.F32` count are its instructions per code; where the loop also converts FP16 scales or
activations (the `tok` down's pass loop stages h and converts a scale per chunk), `--codes N` gives
the weight codes of the longest loop instead. `ALU` counts the integer and logic pipe's share
(LOP3, SHF, PRMT, IADD3, ISETP, LEA, ...), which issues at half the rate of the warp scheduler.
A listing without a backward branch is refused.

--ptx-from prints the PTX of the kernel NAME (its entry name, e.g.
volt8_gate_up_cc_bm1_bn4_w4_sk1_l32__H2560_I160_E512_b128x128_o32) from a kernel cache's PTX entries
(docs/design.md, "Entry"; `volt8 compile --arch sm_70 --cache DIR` fills one), the highest NVRTC
version's where there are several."""
import argparse
import collections
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import regular_file  # noqa: E402

INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)\s*$")
PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")
ALU = {"LOP3", "LOP", "SHF", "PRMT", "IADD3", "ISETP", "LEA", "SEL", "PLOP3", "VIADD", "IABS", "FSETP",
       "ISCADD", "BMSK", "SGXT", "FLO", "POPC", "IMNMX", "VIMNMX"}


def instructions(text):
    """[(address, opcode with its modifiers)] in listing order."""
    out = []
    for line in text.splitlines():
        match = INSTRUCTION.match(line)
        if match:
            body = PREDICATE.sub("", match.group(2).strip())
            out.append((int(match.group(1), 16), body))
    return out


def opcode(body):
    """The opcode's family: HADD2.F32 apart from the other HADD2, modifiers dropped otherwise."""
    word = body.split()[0]
    return "HADD2.F32" if word.startswith("HADD2.F32") else word.split(".")[0]


def loops(listing):
    """(first, last) index of each backward branch's body, longest first."""
    where = {address: index for index, (address, _) in enumerate(listing)}
    found = []
    for index, (address, body) in enumerate(listing):
        match = BRANCH.search(body)
        if match:
            target = int(match.group(1), 16)
            if target <= address and target in where:
                found.append((where[target], index))
    return sorted(found, key=lambda span: span[0] - span[1])


def mix(listing, span):
    return collections.Counter(opcode(body) for _, body in listing[span[0]:span[1] + 1])


def report(listing, count, codes_given=None):
    spans = loops(listing)
    if not spans:
        return None
    out = []
    for rank, span in enumerate(spans[:count]):
        counts = mix(listing, span)
        total = sum(counts.values())
        given = codes_given if rank == 0 else None  # --codes speaks of the longest loop only
        codes = given or counts["HADD2.F32"]
        alu = sum(value for name, value in counts.items() if name in ALU)
        head = (f"loop {listing[span[0]][0]:#x}-{listing[span[1]][0]:#x}: {total} instructions, "
                f"{codes} codes ({'given' if given else 'HADD2.F32'})")
        if codes:
            head += f", {total / codes:.2f} a code, ALU {alu / codes:.2f} a code"
        out.append(head)
        out.append("  " + ", ".join(f"{name} {value}" for name, value in counts.most_common(16)))
    return "\n".join(out)


def cached_ptx(cache_dir, name):
    """The PTX text of kernel `name` from the cache's PTX entries (the newest NVRTC's), or None if absent."""
    found = []
    for folder, _, files in os.walk(cache_dir):
        for file in files:
            path = os.path.join(folder, file)
            if not file.endswith(".entry") or not os.path.isfile(path):
                continue
            with open(path, "rb") as stream:
                data = stream.read()
            if len(data) < 144 or data[:8] != b"VOLT8KCE":
                continue
            kind, _, name_length, payload_length = struct.unpack_from("<IIIQ", data, 12)
            entry_name = data[144:144 + name_length].decode("utf-8", "replace")
            if kind != 0 or entry_name != name:
                continue
            payload = data[144 + name_length:144 + name_length + payload_length]
            version = data[96:112].rstrip(b"\0").decode("ascii", "replace")
            found.append((tuple(int(p) for p in version.split(".") if p.isdigit()), payload.rstrip(b"\0").decode()))
    return max(found)[1] if found else None


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sass", nargs="?")
    parser.add_argument("--loops", type=int, default=1)
    parser.add_argument("--codes", type=int, default=None)
    parser.add_argument("--ptx-from")
    parser.add_argument("--kernel")
    args = parser.parse_args(argv)
    if args.ptx_from or args.kernel:
        if not (args.ptx_from and args.kernel) or args.sass:
            parser.error("--ptx-from CACHE_DIR --kernel NAME go together, without a SASS file")
        ptx = cached_ptx(args.ptx_from, args.kernel)
        if ptx is None:
            print(f"sass_mix: no PTX entry of {args.kernel} in {args.ptx_from}", file=sys.stderr)
            return 1
        sys.stdout.write(ptx)
        return 0
    if not args.sass:
        parser.error("needs a SASS file (or --ptx-from CACHE_DIR --kernel NAME)")
    if args.loops < 1:
        parser.error(f"--loops {args.loops}: needs at least 1")
    if args.codes is not None and args.codes < 1:
        parser.error(f"--codes {args.codes}: needs at least 1")
    text, problem = regular_file.read_text(args.sass)
    if problem:
        print(f"sass_mix: {problem}", file=sys.stderr)
        return 2
    out = report(instructions(text), args.loops, args.codes)
    if out is None:
        print(f"sass_mix: {args.sass} has no backward branch (is it cuobjdump -sass output?)", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
