#!/usr/bin/env python3
"""Two runs of `build/tests/dispatch_picks` compared point by point: how many (rank, M) points pick
another pair, and from which M on, per model and TP size.

    scripts/compare_picks.py BEFORE.txt AFTER.txt

Each input holds "model tp rank M gate_up down" at each M where a rank's pair changes (M = 1 first) and
a closing "points N" line; a pair holds from its M to the next line's."""
import sys


def read_runs(path):
    """{(model, tp, rank): [(first M, (gate_up, down)), ...]} and the run's point count."""
    runs, points = {}, None
    with open(path) as stream:
        for line in stream:
            words = line.split()
            if words[:1] == ["points"]:
                points = int(words[1])
            elif len(words) == 6:
                runs.setdefault((words[0], int(words[1]), int(words[2])), []).append((int(words[3]), (words[4], words[5])))
            elif words:
                raise ValueError(f"{path}: not a dispatch_picks line: {line.strip()}")
    if points is None:
        raise ValueError(f"{path}: no closing points line")
    return runs, points


def pair_at(runs, m):
    current = None
    for first, pair in runs:
        if first > m:
            break
        current = pair
    return current


def compare(before, after, max_m):
    """(points changed, {(model, tp): first changed M})."""
    changed, first = 0, {}
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key, []), after.get(key, [])
        bounds = sorted({m for m, _ in old} | {m for m, _ in new} | {max_m + 1})
        for start, end in zip(bounds, bounds[1:]):
            if pair_at(old, start) != pair_at(new, start):
                changed += end - start
                first[key[:2]] = min(first.get(key[:2], start), start)
    return changed, first


def main(argv):
    if len(argv) != 2:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        (before, points), (after, after_points) = read_runs(argv[0]), read_runs(argv[1])
    except (OSError, ValueError) as error:
        print(f"compare_picks: {error}", file=sys.stderr)
        return 1
    if points != after_points:
        print(f"compare_picks: {points} points against {after_points}", file=sys.stderr)
        return 1
    ranks = len(set(before) | set(after))
    changed, first = compare(before, after, points // max(ranks, 1))
    print(f"points {points} changed {changed}")
    for (model, tp), m in sorted(first.items()):
        print(f"{model} TP{tp}: from M = {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
