#!/usr/bin/env python3
"""The derivation model against measurements (issue 27): per shape, M and op, over the `cc` and `tok`
variants (`mma` is emulated on sm_90, so it says nothing there), the Spearman rank correlation of
predicted and measured times, the model's pick, and its regret.

    scripts/model_check.py MEASURED.jsonl PREDICTED.jsonl [--markdown] [--m 1,2,4,8,16] [--goal 0.10]

MEASURED: `volt8 tune --target-arch sm_70 --log F` on the GPU; PREDICTED: `volt8 tune --derive sm_70
--model-device h200 --log F` for the same shapes. Both groups are the screen pass of one op with the
other op held, so times are forward times: they rank the op's variants, and the regret is on forward
time (what an engine sees), not on the op's own time."""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tunelog  # noqa: E402

FAMILIES = ("cc", "tok")
DEFAULT_M = (1, 2, 4, 8, 16)


def average_ranks(values):
    """Ranks from 1, ties sharing the average of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(first, second):
    """Pearson correlation of the average ranks; None when either side has no spread."""
    if len(first) < 2:
        return None
    a, b = average_ranks(first), average_ranks(second)
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - mean_a) * (y - mean_b) for x, y in zip(a, b))
    var_a = sum((x - mean_a) ** 2 for x in a)
    var_b = sum((y - mean_b) ** 2 for y in b)
    if var_a == 0 or var_b == 0:
        return None
    return cov / math.sqrt(var_a * var_b)


def compare(measured, predicted):
    """One point: {variant: us} measured and predicted, over the variants both have -> a result dict."""
    # In the predicted log's order, the code generator's: a tie goes to the earlier, as in the tuner.
    names = [name for name in predicted if name in measured]
    if not names:
        return None
    pick = min(names, key=lambda name: predicted[name])
    best = min(names, key=lambda name: measured[name])
    return {
        "variants": len(names),
        "spearman": spearman([measured[n] for n in names], [predicted[n] for n in names]),
        "pick": pick, "pick_us": measured[pick], "best": best, "best_us": measured[best],
        "regret": measured[pick] / measured[best] - 1.0,
    }


def points(measured_shapes, predicted_shapes, m_values):
    """(shape, m, op, result or a reason) for each shape of the measured log."""
    for key, shape in measured_shapes.items():
        other = predicted_shapes.get(key)
        for m in m_values:
            for op in ("gate_up", "down"):
                times = {v: us for v, us in shape.accepted_times(m, op).items() if tunelog.family(v) in FAMILIES}
                if not times:
                    continue
                if other is None:
                    yield shape, m, op, "no prediction for this shape"
                    continue
                guess = {v: us for v, us in other.accepted_times(m, op).items() if tunelog.family(v) in FAMILIES}
                result = compare(times, guess)
                yield shape, m, op, result if result else "no variant both measured and predicted"


def format_rho(value):
    return "n/a" if value is None else "%.2f" % value


def report(rows, goal, markdown, out):
    header = ("regret on forward time (the op's screen pass, the other op held: the time an engine sees); "
              "cc and tok variants only (mma is emulated on sm_90)")
    columns = ["shape", "M", "op", "variants", "Spearman", "model's pick", "its time (us)", "best measured",
               "best (us)", "regret"]
    misses, points_done = [], 0
    if markdown:
        print(header + "\n", file=out)
        print(tunelog.markdown_row(columns), file=out)
        print(tunelog.markdown_row(["---"] * len(columns)), file=out)
    else:
        print(header, file=out)
    for shape, m, op, result in rows:
        if isinstance(result, str):
            misses.append("%s M=%d %s: %s" % (shape.label, m, op, result))
            cells = [shape.label, m, op, 0, "", result, "", "", "", ""]
        else:
            points_done += 1
            if result["regret"] > goal:
                misses.append("%s M=%d %s: regret %.1f%% (%s at %.2f us, best %s at %.2f us)" % (
                    shape.label, m, op, 100 * result["regret"], result["pick"], result["pick_us"], result["best"],
                    result["best_us"]))
            cells = [shape.label, m, op, result["variants"], format_rho(result["spearman"]), result["pick"],
                     "%.2f" % result["pick_us"], result["best"], "%.2f" % result["best_us"],
                     "%.1f%%" % (100 * result["regret"])]
        if markdown:
            print(tunelog.markdown_row(cells), file=out)
        else:
            print("%-40s M=%-3d %-7s n=%-3d rho=%-5s pick %-34s %8s us  best %-34s %8s us  regret %s" % tuple(cells),
                  file=out)
    verdict = "goal (regret <= %.0f%% at every point): %s" % (
        100 * goal, "met at all %d points" % points_done if not misses else "%d point(s) miss" % len(misses))
    print(("\n" if markdown else "") + verdict, file=out)
    for miss in misses:
        print(("- " if markdown else "  ") + miss, file=out)
    return misses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("measured")
    parser.add_argument("predicted")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table (for bench/RESULTS.md)")
    parser.add_argument("--m", default=",".join(map(str, DEFAULT_M)), help="token counts (default 1,2,4,8,16)")
    parser.add_argument("--goal", type=float, default=0.10, help="the regret goal (default 0.10)")
    args = parser.parse_args(argv)
    try:
        m_values = [int(text) for text in args.m.split(",")]
        rows = list(points(tunelog.read_all([args.measured]), tunelog.read_all([args.predicted]), m_values))
    except (OSError, ValueError, KeyError) as error:
        print("model_check: %s" % error, file=sys.stderr)
        return 2
    if not rows:
        print("model_check: no cc or tok screen times in %s at M = %s" % (args.measured, args.m), file=sys.stderr)
        return 2
    report(rows, args.goal, args.markdown, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
