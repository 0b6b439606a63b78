"""scripts/rounding_model.py on a small layer: with the families' own rounding points the error is the
output's FP16 rounding alone; each extra rounding point raises it (FP16 z rows, FP16 code * scale
weights, whose gate_up share h's FP16 rounding amplifies); FP16 partial sums over TP ranks add theirs;
bad arguments are refused naming the flag."""
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMALL = ["--hidden", "512", "--intermediate", "128", "--experts", "8", "--top-k", "4", "--tokens", "128"]


def run(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "rounding_model.py"), *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def figures():
    pytest.importorskip("ml_dtypes")
    result = run(*SMALL, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_families_rounding_points_leave_the_output_rounding_alone(figures):
    assert abs(figures["exact"] / figures["fp16(reference)"] - 1) < 0.05, figures


def test_each_extra_rounding_point_raises_the_error(figures):
    assert figures["z16"] > 1.2 * figures["exact"], figures
    assert figures["w16 down"] > 1.2 * figures["exact"], figures
    # gate_up's weight rounding moves h across its FP16 rounding: more than down's
    assert figures["w16 gate_up"] > 1.6 * figures["exact"], figures
    assert figures["w16 gate_up"] > figures["w16 down"], figures
    assert figures["w16"] > figures["w16 gate_up"], figures
    assert figures["w16 z16"] > figures["w16"], figures


def test_fp16_partial_sums_over_ranks_add_their_rounding(figures):
    pytest.importorskip("ml_dtypes")
    result = run(*SMALL, "--tp", "2", "--json")
    assert result.returncode == 0, result.stderr
    ranks = json.loads(result.stdout)
    assert ranks["exact"] > 1.2 * figures["exact"], (ranks, figures)
    assert ranks["fp16(reference)"] == figures["fp16(reference)"]


@pytest.mark.parametrize("args, named", [(["--tp", "3"], "--tp 3"), (["--top-k", "9", "--experts", "8"], "--top-k 9"),
                                         (["--tokens", "0"], "--tokens")])
def test_bad_arguments_say_which(args, named):
    result = run(*args)
    assert result.returncode == 2
    assert named in result.stderr, result.stderr
