"""scripts/compare_picks.py on two hand-made dispatch_picks outputs."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import compare_picks  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "compare_picks.py")
BEFORE = """m 4 0 1 g.a d.a
m 4 0 3 g.b d.a
m 4 1 1 g.a d.a
points 16
"""
# rank 0 moves to g.c from M = 5 (4 points), rank 1 takes d.b at M = 2..3 (2 points)
AFTER = """m 4 0 1 g.a d.a
m 4 0 3 g.b d.a
m 4 0 5 g.c d.a
m 4 1 1 g.a d.a
m 4 1 2 g.a d.b
m 4 1 4 g.a d.a
points 16
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_points_changed_and_the_first_m(tmp_path):
    before, after = write(tmp_path, "before", BEFORE), write(tmp_path, "after", AFTER)
    result = subprocess.run([sys.executable, SCRIPT, before, after], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["points 16 changed 6", "m TP4: from M = 2"]
    same = subprocess.run([sys.executable, SCRIPT, before, before], capture_output=True, text=True)
    assert same.stdout.splitlines() == ["points 16 changed 0"]


def test_runs_of_other_lengths_and_bad_lines_are_refused(tmp_path):
    before = write(tmp_path, "before", BEFORE)
    shorter = write(tmp_path, "shorter", BEFORE.replace("points 16", "points 12"))
    result = subprocess.run([sys.executable, SCRIPT, before, shorter], capture_output=True, text=True)
    assert result.returncode == 1 and "16 points against 12" in result.stderr
    bad = write(tmp_path, "bad", "m 4 0 one g.a\npoints 16\n")
    result = subprocess.run([sys.executable, SCRIPT, before, bad], capture_output=True, text=True)
    assert result.returncode == 1 and "not a dispatch_picks line" in result.stderr


def test_pair_at_takes_the_last_run_begun():
    runs = [(1, ("g.a", "d.a")), (5, ("g.b", "d.a"))]
    assert compare_picks.pair_at(runs, 4) == ("g.a", "d.a")
    assert compare_picks.pair_at(runs, 5) == ("g.b", "d.a")
