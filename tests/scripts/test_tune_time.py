"""scripts/tune_time.py on a small hand-made tune log: the seconds per M and in all, the pruned
and left-out counts, a log without the split, and a FIFO given for a log."""
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def measure(m, variant, wall, split, pruned=False):
    record = {"kind": "measure", "m": m, "op": "gate_up", "variant": variant, "held": "down.raw", "pass": "screen",
              "batches": 4, "accepted": 0 if pruned else 1, "forward_us": None if pruned else 10.0,
              "relative_l2": 1e-4, "wall_ms": wall}
    if split:
        record.update({"setup_ms": wall / 2, "check_ms": wall / 4, "timing_ms": wall / 8})
    else:
        record.update({"setup_ms": None, "check_ms": None, "timing_ms": None})
    if pruned:
        record["reason"] = "pruned: one forward took 50.0 us, over the limit of 40.0 us"
    return record


def m_line(m, split):
    record = {"kind": "m", "m": m, "dispatch_gate_up": "gate_up.raw.a", "dispatch_down": "down.raw"}
    if split:
        record["inputs_ms"] = m / 8.0
    return record


def write_log(tmp_path, split=True):
    shape = {"kind": "shape", "label": "deepseek-v3 tp4 rank 1", "hidden": 7168, "intermediate": 512,
             "num_experts": 256, "intermediate_offset": 0, "block_n": 128, "block_k": 128, "top_k": 8,
             "arch": 90, "measured": 1, "device": "test"}
    if split:
        shape["prepare_ms"] = 3250.0
    records = [shape, m_line(512, split)]
    records += [measure(512, "gate_up.raw.a", 800.0, split), measure(512, "gate_up.tile.b", 480.0, split, pruned=True)]
    records += [m_line(16384, split),
                measure(16384, "gate_up.raw.a", 4000.0, split),
                {"kind": "skip", "m": 16384, "op": "gate_up", "variant": "gate_up.hmma.c",
                 "reason": "pruned at M=512 or before, its items no larger than the pick's at M=512 (64 pairs)"}]
    path = tmp_path / "tune.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def run(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "tune_time.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_seconds_per_m_and_in_all(tmp_path):
    result = run(write_log(tmp_path), "--markdown")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("| shape | M | measures | pruned | left out | wall s")
    assert lines[0].endswith("| shape set-up s | inputs s |")
    # the shape's set-up on its first M's row alone; each M's inputs on its own
    assert "| deepseek-v3 tp4 rank 1 | 512 | 2 | 1 | 0 | 1.3 | 0.6 | 0.3 | 0.2 | 3.2 | 0.1 |" in lines
    assert "| deepseek-v3 tp4 rank 1 | 16384 | 1 | 0 | 1 | 4.0 | 2.0 | 1.0 | 0.5 | - | 2.0 |" in lines
    assert lines[-1] == "| all |  | 3 | 1 | 1 | 5.3 | 2.6 | 1.3 | 0.7 | 3.2 | 2.1 |"


def test_a_log_without_the_split_gives_its_wall_time_alone(tmp_path):
    result = run(write_log(tmp_path, split=False))
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "M=512" in line)
    assert "wall     1.3 s" in row and "set-up       -" in row and "timed       -" in row
    assert "shape set-up       -" in row and "inputs       -" in row


def test_a_fifo_for_a_log_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "tune.jsonl"
    os.mkfifo(fifo)
    result = run(fifo)
    assert result.returncode == 2 and "is not a regular file" in result.stderr, result.stderr
