#!/usr/bin/env python3
"""The fallback rule, evaluated offline: for each shape of the tune logs, its own tables are left out
of a tables folder holding every shape's, the library is asked which pair it would serve then
(`volt8 list --choice M,... --tables DIR`, built-in tables ignored), and that pair's forward time is
estimated from the log. Under the lookup's three rules (runtime/dispatch/tuning_shape.h) a
shape whose own tables are left out is served by the heuristic, so this measures the heuristic, on the
CPU, after one GPU tune, without tuning again.

    scripts/fallback_eval.py --tables DIR LOG.jsonl [LOG2 ...] [--volt8 build/volt8] [--m 1,8,64] [--markdown]

DIR: the tables `volt8 tune` wrote for the logs' shapes (models_tune's logs/tables). The time of a pair
(g, d) that was never timed together, by additivity of the two ops' launches:
    t(g, d) ~ t_gate_up(g | d0) + t_down(d | g*) - t_gate_up(g* | d0)
with d0 the down held while gate_up was screened and g* the gate_up picked (held while down was
screened). Distance = that estimate / the tuned pair's time - 1; where the tables kept the served pair
(the log's "kept" line), the tuned pair is that one, timed as g* was, with d0 held."""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fallback_distance  # noqa: E402
import tunelog  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def own_table_prefixes(record):
    """The name prefixes of a shape's two tables (any device): tuning.h's naming."""
    block = "block=%dx%d,arch=sm_%d," % (record["block_n"], record["block_k"], record["arch"])
    return ("op=gate_up,N=%d,K=%d,%s" % (2 * record["intermediate"], record["hidden"], block),
            "op=down,N=%d,K=%d,%s" % (record["hidden"], record["intermediate"], block))


def tables_without(tables_dir, record, into):
    """Links every table of tables_dir but the shape's own into the folder `into`; how many were left out."""
    own = own_table_prefixes(record)
    left_out = 0
    for name in sorted(os.listdir(tables_dir)):
        if not name.endswith(".json"):
            continue
        if name.startswith(own):
            left_out += 1
            continue
        os.symlink(os.path.abspath(os.path.join(tables_dir, name)), os.path.join(into, name))
    return left_out


def library_choices(volt8, record, m_values, tables):
    """{m: (gate_up, down)} the library serves from `tables` alone."""
    command = [volt8, "list", "--arch", "sm_%d" % record["arch"], "--shape", tunelog.shape_text(
        tuple(record[name] for name in tunelog.SHAPE_KEYS)), "--top-k", str(record["top_k"]),
        "--choice", ",".join(map(str, m_values)), "--tables", tables]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(command), result.returncode, result.stderr.strip()))
    choices = {}
    for line in result.stdout.splitlines():
        m, gate_up, down = line.split()
        choices[int(m)] = (gate_up, down)
    return choices


def estimate(shape, m, pair):
    """A result dict for the pair at M, or a string saying why its time cannot be estimated."""
    tuned_gate_up, tuned_down = shape.picks.get((m, "gate_up")), shape.picks.get((m, "down"))
    gate_up_times, down_times = shape.accepted_times(m, "gate_up"), shape.accepted_times(m, "down")
    if tuned_down not in down_times or tuned_gate_up not in gate_up_times:
        return "no tuned pair with screen times"
    gate_up, down = pair
    for variant, times in ((gate_up, gate_up_times), (down, down_times)):
        if variant not in times:
            return "%s has no screen time (not a candidate, or rejected)" % variant
    estimated = gate_up_times[gate_up] + down_times[down] - gate_up_times[tuned_gate_up]
    tuned_pair, tuned = (tuned_gate_up, tuned_down), down_times[tuned_down]
    kept = shape.kept.get(m)
    if kept and kept[0] in gate_up_times:  # the tables kept the served pair: its time with the served down held
        tuned_pair, tuned = kept, gate_up_times[kept[0]]
    return {"fallback": pair, "fallback_us": estimated, "tuned": tuned_pair, "tuned_us": tuned,
            "distance": estimated / tuned - 1.0}


def evaluate(shapes, tables_dir, volt8, m_values):
    for shape in shapes.values():
        shape_m = [m for m in (m_values or shape.m_values()) if m in shape.m_values()]
        if not shape_m:
            continue
        with tempfile.TemporaryDirectory(prefix="volt8_fallback_eval_") as folder:
            tables_without(tables_dir, shape.record, folder)
            choices = library_choices(volt8, shape.record, shape_m, folder)
        for m in shape_m:
            yield shape, m, estimate(shape, m, choices[m]) if m in choices else "the library printed no pair"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+")
    parser.add_argument("--tables", required=True, help="every shape's tables (each shape's own are left out)")
    parser.add_argument("--volt8", default=os.path.join(ROOT, "build", "volt8"), help="the volt8 command")
    fallback_distance.add_report_arguments(parser)
    args = parser.parse_args(argv)
    try:
        m_values = fallback_distance.m_values_of(args)
        results = list(evaluate(tunelog.read_all(args.logs), args.tables, args.volt8, m_values))
    except (OSError, ValueError, KeyError, RuntimeError, subprocess.TimeoutExpired) as error:
        print("fallback_eval: %s" % error, file=sys.stderr)
        return 2
    if not results:
        print("fallback_eval: no shape and M to evaluate", file=sys.stderr)
        return 2
    header = ("each shape's own tables left out, the pair the library serves then, its forward time (us) estimated "
              "from the log as t_gate_up(g | d0) + t_down(d | g*) - t_gate_up(g* | d0), against the tuned pair's; "
              "distance = estimate / tuned - 1")
    fallback_distance.report(results, args.goal, args.markdown, sys.stdout, header)
    return 0


if __name__ == "__main__":
    sys.exit(main())
