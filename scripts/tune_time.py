#!/usr/bin/env python3
"""Where a GPU tune's time goes, from its logs (`volt8 tune --log FILE`, `models_tune`'s
logs/tune.MODEL.jsonl): per shape and M, the measurements, how many stopped after one timed forward
(pruned), how many were left out (`--skip-pruned`), and the seconds of their wall time split into set-up (variants, workspace, a fresh handle,
graph captures), check (poison, one launch, the copy back, the comparison) and timed passes; the
rest of the wall time is the tuner's own. Outside the measurements: the shape's set-up before its
first M (compiling its variants, making and loading its experts; on that M's row) and each M's
inputs (the input sets and their reference). Logs from before the split, or from the model, give no
seconds (shown as -).

    scripts/tune_time.py LOG.jsonl [LOG2 ...] [--markdown]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tunelog  # noqa: E402

PARTS = ("wall", "setup", "check", "timing", "prepare", "inputs")
HEADER = ["shape", "M", "measures", "pruned", "left out", "wall s", "set-up s", "check s", "timed s", "shape set-up s",
          "inputs s"]


def seconds_cell(sums, part):
    return "%.1f" % sums[part] if part in sums else "-"


def rows(shapes):
    """[label, m, measures, pruned, left out, wall, setup, check, timing, prepare, inputs] per shape and M,
    and the totals."""
    table = []
    totals = {}
    for shape in shapes:
        for index, m in enumerate(sorted(shape.seconds)):
            sums = dict(shape.seconds[m])
            if index == 0 and shape.prepare is not None:
                sums["prepare"] = shape.prepare
            table.append([shape.label, m, sums.get("measures", 0), sums.get("pruned", 0), sums.get("skipped", 0)] +
                         [seconds_cell(sums, part) for part in PARTS])
            for key, value in sums.items():
                totals[key] = totals.get(key, 0) + value
    return table, totals


def main(argv):
    parser = argparse.ArgumentParser(description="Where a GPU tune's time goes, per shape and M.")
    parser.add_argument("logs", nargs="+")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    shapes = []
    try:
        for path in args.logs:
            shapes += tunelog.read(path)
    except (OSError, ValueError) as error:
        print("tune_time: %s" % error, file=sys.stderr)
        return 2
    table, totals = rows(shapes)
    total_row = ["all", "", totals.get("measures", 0), totals.get("pruned", 0), totals.get("skipped", 0)] + \
        [seconds_cell(totals, part) for part in PARTS]
    if args.markdown:
        print(tunelog.markdown_row(HEADER))
        print(tunelog.markdown_row(["---"] * len(HEADER)))
        for row in table + [total_row]:
            print(tunelog.markdown_row(row))
    else:
        for row in table + [total_row]:
            print("%-28s M=%-6s %5s measured %5s pruned %5s left out  wall %7s s  set-up %7s  check %7s  timed %7s"
                  "  shape set-up %7s  inputs %7s" % tuple(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
