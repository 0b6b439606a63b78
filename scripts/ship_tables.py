#!/usr/bin/env python3
"""Copies the measured tables of a GPU run that may ship into tuning/tables.

    scripts/ship_tables.py RUN_TABLES [--into tuning/tables] [--volt8 build/volt8] [--merge] [--seed DIR]
                           [--dry-run]

RUN_TABLES: the tables a `models_tune` call of scripts/gpu_check.sh wrote (logs/tables in its
logs.tgz). A measured table ships when it holds every token count the tuner measures by default (a
tune cut short by its time limit leaves some out) and its N and K are a registry model's rank shape
(`volt8 models --tp N`): no table for a shape that only the tests use. Derived tables (sm_70) are
made here by `volt8 tune --derive sm_70`, not copied. --merge: the run measured other token counts
(`TUNE_M`, large M, say): its entries are merged into the shipped table of the same name, as the
tuner merges (the run's entries replace those of the same M, its runs are added to the runs, a run
of the same date and command as one already there in its place, its metadata heads the table), and
a table ships whatever token counts it holds; of a run table that a call's tune was seeded with, only
the token counts its new runs measured are taken (the seed's entries may be older than what ships
now, after another call's merge), and one to which the tune added nothing leaves the shipped table
as it is. --seed DIR (default: tables_seed beside RUN_TABLES, which such a call writes when it has
a seed): the tables the tune was seeded with; a run a seed table holds is not the tune's, so a run
measured by another call and not shipped (or taken back) does not come in with a later call's seed
copy of it. Prints one line per table, copied, merged,
unchanged or skipped and why; exits 1 when a table cannot be read."""
import argparse
import json
import os
import shutil
import subprocess
import sys

FULL_M = {1, 2, 4, 8, 16, 32, 64, 128}
TP_SIZES = (1, 2, 4, 8)


def model_op_shapes(volt8):
    """{(op, N, K)} of every registry model's ranks at TP 1, 2, 4 and 8, as the tables name them: gate_up's
    N counts the gate and the up rows (2 I), down's K is I."""
    shapes = set()
    for tp in TP_SIZES:
        lines = subprocess.run([volt8, "models", "--tp", str(tp)], check=True, capture_output=True,
                               text=True).stdout.splitlines()
        for line in lines:
            fields = dict(item.split("=", 1) for item in line.split()[3].split(","))
            hidden, intermediate = int(fields["hidden"]), int(fields["intermediate"])
            shapes.add(("gate_up", 2 * intermediate, hidden))
            shapes.add(("down", hidden, intermediate))
    return shapes


def verdict(table, shapes, merge=False):
    """None when the table may ship, else why not."""
    meta = table.get("__metadata__", {})
    if not meta.get("measured"):
        return "not measured (derived tables are made by volt8 tune --derive)"
    if meta.get("arch") == "sm_70":
        return "the compute_70 PTX timed on another GPU (a V100's tables are derived)"
    key = (meta.get("op"), meta.get("N"), meta.get("K"))
    if key not in shapes:
        return f"op {key[0]} N {key[1]} K {key[2]} is no registry model's rank shape"
    missing = sorted(FULL_M - {int(m) for m in table if m != "__metadata__"})
    if missing and not merge:
        return f"M {','.join(map(str, missing))} not measured (a tune cut short)"
    return None


MAX_RUNS_KEPT = 64  # tuning/table_io.c keeps as many


def run_key(run):
    """What names a tune run, as tuning/table_io.c's same_run compares them."""
    return (run.get("date"), run.get("command"))


def merged(shipped, run, seed=None):
    """The shipped table with the run's entries and runs merged in (tuning/table_io.c's merge), and
    the token counts taken from the run: a run the shipped table already holds is replaced, not
    added again. Only the token counts measured by the run table's runs that the shipped table does
    not hold are taken: the rest of a seeded run table are its seed's entries, which another call's
    merge may since have replaced. A run table
    whose every run is shipped adds nothing, and one whose new runs do not say what they measured
    (no "m") gives all its entries, as before runs said it. seed: the table the tune was seeded
    with, if any: its runs are not the tune's, and those the shipped table lacks are left out."""
    shipped_runs = shipped.get("__metadata__", {}).get("runs", [])
    shipped_keys = {run_key(item) for item in shipped_runs}
    seed_keys = {run_key(item) for item in (seed or {}).get("__metadata__", {}).get("runs", [])}
    run_runs = [item for item in run["__metadata__"].get("runs", [])
                if run_key(item) not in seed_keys or run_key(item) in shipped_keys]
    fresh = [item for item in run_runs if run_key(item) not in shipped_keys]
    if run_runs and not fresh:
        return shipped, []
    taken = None if not run_runs or any("m" not in item for item in fresh) else \
        {str(value) for item in fresh for value in item["m"]}
    meta = dict(run["__metadata__"])
    new_keys = {run_key(item) for item in run_runs}
    old_runs = [item for item in shipped_runs if run_key(item) not in new_keys]
    meta["runs"] = (old_runs[-(MAX_RUNS_KEPT - 1):] if len(old_runs) > MAX_RUNS_KEPT - 1 else list(old_runs)) + run_runs
    if shipped.get("__metadata__", {}).get("measured") is False:
        meta["measured"] = False
    from_run = {key: value for key, value in run.items() if key != "__metadata__" and (taken is None or key in taken)}
    entries = {key: value for key, value in shipped.items() if key != "__metadata__"}
    entries.update(from_run)
    out = {"__metadata__": meta}
    for key in sorted(entries, key=int):
        out[key] = entries[key]
    return out, sorted(from_run, key=int)


def render(table):
    """The table as the tuner writes it: a metadata field a line, an entry a line, values compact."""
    compact = lambda value: json.dumps(value, separators=(",", ":"))
    meta = table["__metadata__"]
    lines = ["{", '  "__metadata__": {']
    lines += [f"    {json.dumps(key)}: {compact(value)}," for key, value in meta.items()]
    lines[-1] = lines[-1][:-1]
    lines.append("  },")
    lines += [f"  {json.dumps(key)}: {compact(value)}," for key, value in table.items() if key != "__metadata__"]
    lines[-1] = lines[-1][:-1]
    return "\n".join(lines + ["}"]) + "\n"


def read_table(path):
    """(the table, None), or (None, what went wrong)."""
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream), None
    except (OSError, ValueError) as error:
        return None, error


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_tables")
    parser.add_argument("--into", default="tuning/tables")
    parser.add_argument("--volt8", default="build/volt8")
    parser.add_argument("--merge", action="store_true", help="merge into the shipped tables")
    parser.add_argument("--seed", help="the tables the tune was seeded with (default: RUN_TABLES/../tables_seed)")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    seed_dir = args.seed or os.path.join(os.path.dirname(os.path.abspath(args.run_tables)), "tables_seed")
    if args.seed and not os.path.isdir(args.seed):
        parser.error(f"--seed {args.seed} is not a folder")
    if not os.path.isdir(args.run_tables) or not os.path.isdir(args.into):
        parser.error(f"{args.run_tables} and {args.into} must be folders")
    shapes = model_op_shapes(args.volt8)
    status = 0
    for name in sorted(os.listdir(args.run_tables)):
        path = os.path.join(args.run_tables, name)
        if not name.endswith(".json") or not os.path.isfile(path):
            continue
        table, error = read_table(path)
        if error:
            print(f"unreadable {name}: {error}")
            status = 1
            continue
        why = verdict(table, shapes, args.merge)
        if why:
            print(f"skipped {name}: {why}")
            continue
        target = os.path.join(args.into, name)
        if args.merge and os.path.isfile(target):
            before, error = read_table(target)
            if error:
                print(f"unreadable shipped {target}: {error}")
                status = 1
                continue
            seed, seed_path = None, os.path.join(seed_dir, name)
            if os.path.isfile(seed_path):
                seed, error = read_table(seed_path)
                if error:
                    print(f"unreadable seed {seed_path}: {error}")
                    status = 1
                    continue
            table, taken = merged(before, table, seed)
            if table == before:
                print(f"unchanged {name}: the shipped table holds every entry and run of it")
                continue
            if not args.dry_run:
                with open(target, "w", encoding="utf-8") as stream:
                    stream.write(render(table))
            print(f"{'would merge' if args.dry_run else 'merged'} {name}: M {','.join(taken)} of the run")
            continue
        if not args.dry_run:
            shutil.copyfile(path, target)
        print(f"{'would copy' if args.dry_run else 'copied'} {name}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
