#!/usr/bin/env python3
"""RESULTS' "Large M" table from `volt8 bench --json` reports (`models_bench`'s logs/bench.MODEL.tpN.json):
per rank, volt8's median time and B's time over it (cuBLAS grouped FP16, same run) at each M, and C's
(the sorted-and-padded batched cuBLASLt peer) where the report has it; from
--share-from M on, the share of the m16n8k16 peak that volt8's useful FLOP rate reaches (2 x pairs x
hidden x intermediate x 3 FLOP). Then issue 36's targets over all the reports (1.3x B at M = 128..1024,
1.0x past it, M = 2048 against M = 64), and at the largest M of each report what the top-k sum leaves
for the GEMMs: the sum is a pass of its own over the pairs' FP16 rows and writes the FP16 output, so at
the report's copy rate (read + write) it takes at least (pairs + M) x hidden x 2 bytes' time; the
GEMMs would need the printed share of the peak for the whole forward to reach --goal percent.

    scripts/large_m_table.py REPORT.json [...] (--peak TFLOPS | --peak-file mma_peak.txt)
        [--share-from 4096] [--goal 60]

--peak-file reads the "peak m16n8k16 registers X TFLOP/s" line of `mma_peak`'s output (bench/probes).
"""
import argparse
import json
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import regular_file  # noqa: E402
import tunelog  # noqa: E402

PEAK_LINE = re.compile(r"^peak m16n8k16 registers ([0-9.]+) TFLOP/s", re.M)


class Bad(Exception):
    pass


def read_json(path):
    text, problem = regular_file.read_text(path)
    if problem:
        raise Bad(problem)
    try:
        return json.loads(text)
    except ValueError as error:
        raise Bad(f"{path} is not JSON: {error}") from None


def peak_from_file(path):
    text, problem = regular_file.read_text(path)
    if problem:
        raise Bad(problem)
    found = PEAK_LINE.search(text)
    if not found:
        raise Bad(f"{path} has no line 'peak m16n8k16 registers X TFLOP/s'")
    return float(found.group(1))


def rank_name(report, path):
    """'MODEL TPn' from the report's command, else the file's name."""
    try:
        words = shlex.split(report.get("command", ""))
    except ValueError:
        words = []
    options = {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i].startswith("--")}
    if "--model" in options:
        return "%s TP%s" % (options["--model"], options.get("--tp", "1"))
    return os.path.basename(path)


class Rank:
    """One report: its shape, copy rate and, per M, volt8's, B's and C's median times in us (None where a
    baseline did not run or the report has none)."""

    def __init__(self, report, path):
        try:
            shape = report["shape"]
            self.hidden, self.intermediate, self.top_k = (int(shape[key]) for key in ("hidden", "intermediate", "top_k"))
            self.copy_gbps = float(report["device"]["copy_gbps"])
            self.times = {}
            for result in report["results"]:
                volt8 = result["volt8"]
                baselines = [result.get(key) or {} for key in ("cublas_grouped_fp16", "sorted_padded_fp16")]
                if not volt8.get("ran"):
                    raise Bad(f"{path}: volt8 did not run at M = {result['m']}")
                m = int(result["m"])
                times = (float(volt8["median_us"]),) + tuple(float(b["median_us"]) if b.get("ran") else None
                                                             for b in baselines)
                if m <= 0 or not all(time > 0 for time in times if time is not None):
                    raise Bad(f"{path}: M = {m} with times {times}: M and every time must be above 0")
                self.times[m] = times
        except (KeyError, TypeError, ValueError) as error:
            raise Bad(f"{path} is not a volt8 bench report: {error!r} missing or wrong") from None
        if not self.times:
            raise Bad(f"{path} holds no token counts")
        self.name = rank_name(report, path)

    def flop(self, m):
        return 2.0 * m * self.top_k * self.hidden * self.intermediate * 3

    def share(self, m, peak_tflops):
        return self.flop(m) / (self.times[m][0] * 1e-6) / (peak_tflops * 1e12)

    def sum_bytes(self, m):
        """The top-k sum's traffic: the pairs' FP16 rows read, the FP16 output written."""
        return (m * self.top_k + m) * self.hidden * 2

    def sum_floor_us(self, m):
        """The top-k sum's least time, its traffic at the copy rate."""
        return self.sum_bytes(m) / (self.copy_gbps * 1e9) * 1e6

    def gemm_need(self, m, peak_tflops, goal):
        """The share of the peak the GEMMs need for the forward to reach `goal` (a fraction), or None
        where even GEMMs at no time could not; and the GEMMs' share now, the sum at its floor."""
        at_peak_us = self.flop(m) / (peak_tflops * 1e12) * 1e6
        left_us = at_peak_us / goal - self.sum_floor_us(m)
        rest_us = self.times[m][0] - self.sum_floor_us(m)
        return (at_peak_us / left_us if left_us > 0 else None), (at_peak_us / rest_us if rest_us > 0 else None)


def table(ranks, peak, share_from):
    ms = sorted({m for rank in ranks for m in rank.times})
    lines = [tunelog.markdown_row(["rank"] + ["M = %d" % m for m in ms]), "|---" * (len(ms) + 1) + "|"]
    for rank in ranks:
        cells = []
        for m in ms:
            if m not in rank.times:
                cells.append("-")
                continue
            volt8, baseline, peer = rank.times[m]
            cell = "%.0f us" % volt8 + (", %.2fx B" % (baseline / volt8) if baseline else "")
            cell += ", %.2fx C" % (peer / volt8) if peer else ""
            if m >= share_from:
                cell += " (%.1f%%)" % (100 * rank.share(m, peak))
            cells.append(cell)
        lines.append(tunelog.markdown_row([rank.name] + cells))
    return lines


def need_text(need):
    if need is None:
        return "more than the peak (out of reach)"
    return "%.0f%% of the peak" % (100 * need) + (" (out of reach)" if need > 1 else "")


def targets(ranks, peak, share_from, goal):
    lines = []
    for low, high, need in ((128, 1024, 1.3), (2048, None, 1.0)):
        points = [(baseline / volt8, rank.name, m) for rank in ranks for m, (volt8, baseline, _) in rank.times.items()
                  if baseline and m >= low and (high is None or m <= high)]
        if points:
            lowest = min(points)
            span = "M = %d..%s" % (low, high if high else "")
            lines.append("%.1fx B at %s: %d of %d points (lowest %s M = %d, %.2fx)" %
                         (need, span, sum(x >= need for x, _, _ in points), len(points), lowest[1], lowest[2], lowest[0]))
    for rank in ranks:
        if 64 in rank.times and 2048 in rank.times:
            lines.append("%s: M = 2048 takes %.2fx the time of M = 64 (target 3x)" %
                         (rank.name, rank.times[2048][0] / rank.times[64][0]))
    shares = [(rank.share(m, peak), rank.name, m) for rank in ranks for m in rank.times if m >= share_from]
    if shares:
        best = max(shares)
        lines.append("best share of the %.1f TFLOP/s peak at M >= %d: %.1f%% (%s M = %d; goal %.0f%%)" %
                     (peak, share_from, 100 * best[0], best[1], best[2], 100 * goal))
    for rank in ranks:
        m = max(rank.times)
        if m < share_from:
            continue
        need, now = rank.gemm_need(m, peak, goal)
        lines.append("%s M = %d: the top-k sum %.2f GB, at least %.0f us at %.0f GB/s; for %.0f%% the GEMMs need %s, "
                     "now %s" %
                     (rank.name, m, rank.sum_bytes(m) / 1e9, rank.sum_floor_us(m), rank.copy_gbps,
                      100 * goal, need_text(need),
                      "%.0f%%" % (100 * now) if now else "-"))
    return lines


def main(argv):
    parser = argparse.ArgumentParser(description="The Large M table, targets and top-k sum bound from bench reports.")
    parser.add_argument("reports", nargs="+")
    peak_group = parser.add_mutually_exclusive_group(required=True)
    peak_group.add_argument("--peak", type=float, help="the m16n8k16 peak in TFLOP/s")
    peak_group.add_argument("--peak-file", help="mma_peak's output")
    parser.add_argument("--share-from", type=int, default=4096)
    parser.add_argument("--goal", type=float, default=60.0, help="percent of the peak")
    args = parser.parse_args(argv)
    try:
        peak = args.peak if args.peak is not None else peak_from_file(args.peak_file)
        if not peak > 0:
            raise Bad(f"--peak {peak}: must be above 0")
        if not 0 < args.goal <= 100:
            raise Bad(f"--goal {args.goal}: must be above 0 and at most 100")
        ranks = [Rank(read_json(path), path) for path in args.reports]
    except Bad as error:
        print("large_m_table: %s" % error, file=sys.stderr)
        return 2
    for line in table(ranks, peak, args.share_from) + [""] + targets(ranks, peak, args.share_from, args.goal / 100):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
