"""Reading `volt8 tune --log FILE` (JSON Lines: shape, m, measure and pick records; docs/testing.md),
shared by scripts/model_check.py, scripts/fallback_distance.py and scripts/fallback_eval.py."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import regular_file  # noqa: E402

SHAPE_KEYS = ("hidden", "intermediate", "intermediate_offset", "num_experts", "block_n", "block_k", "top_k")


class Shape:
    """One tuned shape of a log: its record, the dispatch picks per M, every screen/final time by
    (m, op, pass) as {variant: (forward_us or None, accepted, held)}, the picks by (m, op), and the
    served pairs kept in their place by m."""

    def __init__(self, record):
        self.record = record
        self.key = tuple(record.get(name) for name in SHAPE_KEYS)
        self.label = record.get("label") or "H=%s I=%s (offset %s) E=%s top-%s" % tuple(self.key[i] for i in (0, 1, 2, 3, 6))
        self.dispatch = {}
        self.groups = {}
        self.picks = {}
        self.kept = {}  # {m: (gate_up, down)}: the served pair the tables kept, the tuned pair no faster in the finals
        self.seconds = {}  # {m: {"measures", "pruned", "skipped", "wall", "setup", "check", "timing", "inputs"}}, from measured logs
        prepare = record.get("prepare_ms")
        self.prepare = prepare / 1e3 if is_number(prepare) else None  # seconds before the first M (compiling, the experts)

    def group(self, m, op, pass_name="screen"):
        return self.groups.get((m, op, pass_name), {})

    def accepted_times(self, m, op, pass_name="screen"):
        """{variant: forward_us} of the accepted, timed candidates of one group."""
        return {variant: us for variant, (us, accepted, _) in self.group(m, op, pass_name).items()
                if accepted and us is not None}

    def held(self, m, op, pass_name="screen"):
        helds = {held for _, _, held in self.group(m, op, pass_name).values()}
        return helds.pop() if len(helds) == 1 else None

    def m_values(self):
        return sorted({m for m, _, _ in self.groups})


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def add_seconds(sums, record):
    """Adds one measure record's wall time and its split (milliseconds in the log; absent or null in a
    log from before them, or from the model) to an M's sums, in seconds."""
    sums["measures"] = sums.get("measures", 0) + 1
    sums["pruned"] = sums.get("pruned", 0) + (1 if str(record.get("reason", "")).startswith("pruned") else 0)
    for part in ("wall", "setup", "check", "timing"):
        value = record.get(part + "_ms")
        if is_number(value):
            sums[part] = sums.get(part, 0.0) + value / 1e3


def shape_text(key):
    """The `--shape` text of a shape key (without top_k)."""
    return ",".join("%s=%s" % (name, value) for name, value in zip(SHAPE_KEYS[:6], key[:6]))


def read(path):
    """The shapes of one log, in order. A shape tuned twice (same key) in one log keeps the later times."""
    shapes = []
    current = None
    why = regular_file.why_not_regular(path)
    if why:
        raise ValueError(why)
    with open(path, encoding="utf-8") as stream:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError("%s:%d: not JSON (%s)" % (path, number, error)) from None
            kind = record.get("kind")
            if kind == "shape":
                current = Shape(record)
                shapes.append(current)
            elif current is None:
                raise ValueError("%s:%d: a %s record before any shape record" % (path, number, kind))
            elif kind == "m":
                current.dispatch[record["m"]] = (record.get("dispatch_gate_up"), record.get("dispatch_down"))
                if is_number(record.get("inputs_ms")):
                    current.seconds.setdefault(record["m"], {})["inputs"] = record["inputs_ms"] / 1e3
            elif kind == "measure":
                group = current.groups.setdefault((record["m"], record["op"], record.get("pass", "screen")), {})
                group[record["variant"]] = (record.get("forward_us"), bool(record.get("accepted")), record.get("held"))
                add_seconds(current.seconds.setdefault(record["m"], {}), record)
            elif kind == "skip":
                sums = current.seconds.setdefault(record["m"], {})
                sums["skipped"] = sums.get("skipped", 0) + 1
            elif kind == "pick":
                current.picks[(record["m"], record["op"])] = record["variant"]
            elif kind == "kept":
                current.kept[record["m"]] = (record["gate_up"], record["down"])
    return shapes


def read_all(paths):
    """Shapes of several logs by key. Where two logs hold the same shape (a tune resumed over several
    calls, `volt8 tune --resume 1`), they join: a later log's M replaces the same M of an earlier one's,
    and the other M of both are kept."""
    shapes = {}
    for path in paths:
        for shape in read(path):
            if shape.key in shapes:
                merge(shapes[shape.key], shape)
            else:
                shapes[shape.key] = shape
    return shapes


def merge(into, later):
    """Joins `later` (the same shape, from a later log) into `into`: every M `later` holds replaces
    that M's dispatch, groups, picks and seconds in `into`."""
    m_values = set(later.dispatch) | {m for m, _, _ in later.groups} | {m for m, _ in later.picks} | set(later.seconds)
    into.groups = {key: value for key, value in into.groups.items() if key[0] not in m_values}
    into.picks = {key: value for key, value in into.picks.items() if key[0] not in m_values}
    for m in m_values:
        into.dispatch.pop(m, None)
        into.seconds.pop(m, None)
        into.kept.pop(m, None)
    into.dispatch.update(later.dispatch)
    into.groups.update(later.groups)
    into.picks.update(later.picks)
    into.kept.update(later.kept)
    into.seconds.update(later.seconds)


def family(variant):
    parts = variant.split(".")
    return parts[1] if len(parts) > 1 else ""


def markdown_row(cells):
    return "| " + " | ".join(str(cell) for cell in cells) + " |"
