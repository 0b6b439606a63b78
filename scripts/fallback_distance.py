#!/usr/bin/env python3
"""How far the dispatch fallback's pair is from the tuned pair (issue 24, "shapes without a table"),
from `volt8 tune --log` files of the models_tune phase (scripts/gpu_check.sh). At tuning time only the
shipped tables are loaded, so for a shape without its own table the log's dispatch pair is the
fallback's.

    scripts/fallback_distance.py LOG.jsonl [LOG2 ...] [--m 1,8,64] [--markdown] [--goal 0.15]

Per shape and M: the fallback pair's forward time is the screen time of the dispatch's gate_up in the
gate_up group (its down held, the dispatch's down); the tuned pair's is the screen time of the picked
down in the down group (the picked gate_up held). Distance = fallback / tuned - 1; 0 where the tables
kept the served pair (the log's "kept" line: the tuned pair no faster in the final passes)."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tunelog  # noqa: E402


def distance(shape, m):
    """A result dict, or a string saying why there is none."""
    if m not in shape.dispatch:
        return "no dispatch record"
    gate_up, down = shape.dispatch[m]
    tuned_gate_up, tuned_down = shape.picks.get((m, "gate_up")), shape.picks.get((m, "down"))
    if not tuned_down:
        return "no tuned pair (no candidate passed)"
    screened = shape.group(m, "gate_up")
    if gate_up not in screened:
        return "the dispatch's gate_up %s was not among the candidates timed" % gate_up
    fallback_us, accepted, _ = screened[gate_up]
    if not accepted or fallback_us is None:
        return "the dispatch's gate_up %s was rejected" % gate_up
    if m in shape.kept:  # the tables kept the served pair: the fallback is the tuned pair
        return {"fallback": (gate_up, down), "fallback_us": fallback_us, "tuned": shape.kept[m],
                "tuned_us": fallback_us, "distance": 0.0}
    tuned_us = shape.accepted_times(m, "down").get(tuned_down)
    if tuned_us is None:
        return "the picked down %s has no screen time" % tuned_down
    return {"fallback": (gate_up, down), "fallback_us": fallback_us, "tuned": (tuned_gate_up, tuned_down),
            "tuned_us": tuned_us, "distance": fallback_us / tuned_us - 1.0}


def rows(shapes, m_values):
    for shape in shapes.values():
        for m in m_values or shape.m_values():
            if m in shape.dispatch or m in shape.m_values():
                yield shape, m, distance(shape, m)


HEADER = "fallback pair against the tuned pair, screen-pass forward times (us); distance = fallback / tuned - 1"


def report(results, goal, markdown, out, header=HEADER):
    columns = ["shape", "M", "fallback gate_up / down", "fallback (us)", "tuned gate_up / down", "tuned (us)",
               "distance", ""]
    print(header + ("\n" if markdown else ""), file=out)
    if markdown:
        print(tunelog.markdown_row(columns), file=out)
        print(tunelog.markdown_row(["---"] * len(columns)), file=out)
    over, missing, done = [], [], 0
    for shape, m, result in results:
        if isinstance(result, str):
            missing.append("%s M=%d: %s" % (shape.label, m, result))
            cells = [shape.label, m, result, "", "", "", "", ""]
        else:
            done += 1
            flag = "> %.0f%%" % (100 * goal) if result["distance"] > goal else ""
            if flag:
                over.append("%s M=%d: %+.1f%%" % (shape.label, m, 100 * result["distance"]))
            cells = [shape.label, m, " / ".join(result["fallback"]), "%.2f" % result["fallback_us"],
                     " / ".join(result["tuned"]), "%.2f" % result["tuned_us"], "%+.1f%%" % (100 * result["distance"]),
                     flag]
        if markdown:
            print(tunelog.markdown_row(cells), file=out)
        elif isinstance(result, str):
            print("%-32s M=%-4d %s" % (shape.label, m, result), file=out)
        else:
            print("%-32s M=%-4d fallback %-70s %9s  tuned %-70s %9s  %7s %s" % tuple(cells), file=out)
    print(("\n" if markdown else "") + "goal (within %.0f%% everywhere): %d of %d points over" % (100 * goal, len(over), done),
          file=out)
    for line in over + missing:
        print(("- " if markdown else "  ") + line, file=out)
    return over, missing


def add_report_arguments(parser):
    """--m, --markdown and --goal: what M to report and how; fallback_eval.py takes them too."""
    parser.add_argument("--m", help="token counts (default: every M of the logs)")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table (for bench/RESULTS.md)")
    parser.add_argument("--goal", type=float, default=0.15, help="the distance goal (default 0.15)")


def m_values_of(args):
    return [int(text) for text in args.m.split(",")] if args.m else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+")
    add_report_arguments(parser)
    args = parser.parse_args(argv)
    try:
        m_values = m_values_of(args)
        shapes = tunelog.read_all(args.logs)
    except (OSError, ValueError, KeyError) as error:
        print("fallback_distance: %s" % error, file=sys.stderr)
        return 2
    results = list(rows(shapes, m_values))
    if not results:
        print("fallback_distance: no shape and M to compare in %s" % " ".join(args.logs), file=sys.stderr)
        return 2
    report(results, args.goal, args.markdown, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
