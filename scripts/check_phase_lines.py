#!/usr/bin/env python3
"""Checks the output of `make test` (scripts/timed_phases.sh) for one timing line per phase.

    check_phase_lines.py LOG PHASE...

Exit 0 when LOG has, for every PHASE, one line "make test: phase PHASE <s> s (CPU <s> s)" (in any
order: a phase run in the background prints its line last) and the line "make test: all phases <s> s
(CPU <s> s)"; else 1, naming what is missing.
"""
import re
import sys

TIMING = re.compile(r"^make test: phase (\S+) (\d+) s \(CPU (\d+) s\)$")
TOTAL = re.compile(r"^make test: all phases (\d+) s \(CPU (\d+) s\)$")


def problems(lines, phases):
    timed = [match.group(1) for match in map(TIMING.match, lines) if match]
    found = []
    for phase in phases:
        count = timed.count(phase)
        if count != 1:
            found.append(f"phase {phase}: {count} timing lines, expected 1")
    if not any(map(TOTAL.match, lines)):
        found.append('no "make test: all phases" line')
    return found


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as log:
        lines = [line.rstrip("\n") for line in log]
    found = problems(lines, argv[2:])
    for problem in found:
        print(f"check_phase_lines: {argv[1]}: {problem}", file=sys.stderr)
    if not found:
        print(f"check_phase_lines: {len(argv) - 2} phases timed: "
              + ", ".join(line for line in lines if TIMING.match(line) or TOTAL.match(line)).replace("make test: ", ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
