#!/usr/bin/env python3
"""Where the warps of a profiled kernel wait: the SASS lines with the most warp-state samples.

    scripts/stall_lines.py SOURCE.csv [--top 40]

SOURCE.csv: `ncu -i REPORT --page source --csv --print-source sass` of a report collected with
`--section SourceCounters` (the profile phase of scripts/gpu_check.sh with PROFILE_SOURCE=1). Each
kernel's table starts at a header row naming a "Source" column and a "Warp Stall Sampling (All
Samples)" column; a row of text before it, if any, names the kernel. Per kernel it prints the
total samples and the top lines: share of the kernel's samples, samples, not-issued samples where
ncu gives them, and the SASS text. A file with no such header is refused, naming the columns it saw,
so a changed ncu format is said, not read wrong."""
import argparse
import csv
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import regular_file  # noqa: E402

SAMPLES = "Warp Stall Sampling (All Samples)"
NOT_ISSUED = "Warp Stall Sampling (Not-issued Samples)"


def number(text):
    """A sample count as ncu prints it ("1,234", "12", ""), or None when it is not one."""
    text = text.replace(",", "").strip()
    if not text:
        return 0
    try:
        return float(text)
    except ValueError:
        return None


def column(header, name):
    """Index of the column whose name starts with `name` (ncu may add units), or None."""
    for index, cell in enumerate(header):
        if cell.strip().startswith(name):
            return index
    return None


def kernels(rows):
    """[(label, [(samples, not_issued or None, source)])], one entry per header row found."""
    found, label, current, indices = [], "", None, None
    for row in rows:
        if column(row, "Source") is not None and column(row, SAMPLES) is not None:
            indices = (column(row, "Source"), column(row, SAMPLES), column(row, NOT_ISSUED))
            current = []
            found.append((label or f"kernel {len(found) + 1}", current))
            label = ""
            continue
        samples = None
        if current is not None and len(row) > max(i for i in indices if i is not None):
            samples = number(row[indices[1]])
        if samples is None:
            # Not a line of the table: a kernel's name before its header, or the end of a table.
            text = " ".join(cell.strip() for cell in row if cell.strip())
            if text:
                label, current = text, None
            continue
        not_issued = number(row[indices[2]]) if indices[2] is not None else None
        current.append((samples, not_issued, row[indices[0]].strip()))
    return found


def report(found, top):
    out = []
    for name, lines in found:
        total = sum(samples for samples, _, _ in lines)
        out.append(f"== {name}: {total:.0f} samples over {len(lines)} SASS lines")
        if total <= 0:
            continue
        for samples, not_issued, source in sorted(lines, key=lambda line: -line[0])[:top]:
            issued = f" {not_issued:8.0f}" if not_issued is not None else ""
            out.append(f"{100.0 * samples / total:6.2f}% {samples:8.0f}{issued}  {source}")
    return "\n".join(out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source_csv")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"--top {args.top}: needs at least 1")
    text, problem = regular_file.read_text(args.source_csv, newline="")
    if problem:
        print(f"stall_lines: {problem}", file=sys.stderr)
        return 2
    rows = list(csv.reader(io.StringIO(text, newline="")))
    found = kernels(rows)
    if not found:
        first = next((row for row in rows if row), [])
        print(f"stall_lines: {args.source_csv} has no header with \"Source\" and \"{SAMPLES}\" "
              f"(first row: {', '.join(first[:8]) or 'none'})", file=sys.stderr)
        return 1
    print(report(found, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
