"""`make test`'s phases: scripts/timed_phases.sh prints a timing line per phase, runs a phase marked
with & alongside the others and stops at a failing one, scripts/check_phase_lines.py (run by .ci/run) finds a missing line, and the phases .ci/run
expects are the ones the Makefile runs."""
import pathlib
import re
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DRIVER = ROOT / "scripts" / "timed_phases.sh"
CHECKER = ROOT / "scripts" / "check_phase_lines.py"
BUSY = f"{shlex.quote(sys.executable)} -c 'import time; end = time.process_time() + 1.5\nwhile time.process_time() < end: pass'"


def run_driver(*phases):
    return subprocess.run([str(DRIVER), *phases], capture_output=True, text=True, timeout=120)


def check(tmp_path, output, *phases):
    log = tmp_path / "make-test.log"
    log.write_text(output)
    return subprocess.run([sys.executable, str(CHECKER), str(log), *phases], capture_output=True, text=True)


def test_each_phase_prints_wall_and_cpu_seconds(tmp_path):
    result = run_driver("quiet", "true", "busy", BUSY, "talks", "echo from the phase")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    timings = {m.group(1): (int(m.group(2)), int(m.group(3)))
               for m in map(re.compile(r"^make test: phase (\S+) (\d+) s \(CPU (\d+) s\)$").match, lines) if m}
    assert list(timings) == ["quiet", "busy", "talks"], result.stdout
    assert timings["busy"][1] >= 1, f"1.5 s of CPU counted as {timings['busy'][1]}: {result.stdout}"
    assert timings["quiet"][1] == 0, result.stdout
    assert "from the phase" in lines, "a phase's own output is shown as it comes"
    assert re.match(r"^make test: all phases \d+ s \(CPU \d+ s\)$", lines[-1]), result.stdout
    assert check(tmp_path, result.stdout, "quiet", "busy", "talks").returncode == 0


def test_a_failing_phase_stops_the_run_and_the_check_names_what_is_missing(tmp_path):
    result = run_driver("first", "true", "broken", "exit 3", "never", "echo should not run")
    assert result.returncode == 3, result.stdout
    assert "make test: phase broken 0 s (CPU 0 s), FAILED with status 3" in result.stdout.splitlines()
    assert "should not run" not in result.stdout
    checked = check(tmp_path, result.stdout, "first", "broken", "never")
    assert checked.returncode == 1
    assert "phase broken: 0 timing lines" in checked.stderr and "phase never: 0 timing lines" in checked.stderr
    assert "all phases" in checked.stderr


def test_a_background_phase_runs_alongside_and_reports_last(tmp_path):
    marker = tmp_path / "started"
    # the phase in turn waits for the background one to have started: they overlap
    result = run_driver("side&", f"touch {marker}; echo from the side; {BUSY}",
                        "main", f"while [ ! -e {marker} ]; do sleep 0.1; done; echo main done")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines.index("main done") < lines.index("from the side"), "a background phase's output comes at the end"
    assert re.match(r"^make test: phase side \d+ s \(CPU [1-9]\d* s\)$", lines[-2]), result.stdout
    assert check(tmp_path, result.stdout, "main", "side").returncode == 0
    failed = run_driver("side&", "exit 5", "main", "true")
    assert failed.returncode == 5 and "make test: phase side 0 s (CPU 0 s), FAILED with status 5" in failed.stdout


def test_the_check_refuses_a_missing_or_repeated_phase(tmp_path):
    line = "make test: phase {} 3 s (CPU 5 s)\n"
    total = "make test: all phases 9 s (CPU 15 s)\n"
    assert check(tmp_path, line.format("a") + line.format("b") + total, "a", "b").returncode == 0
    missing = check(tmp_path, line.format("a") + total, "a", "b")
    assert missing.returncode == 1 and "phase b: 0 timing lines" in missing.stderr
    repeated = check(tmp_path, line.format("a") * 2 + line.format("b") + total, "a", "b")
    assert repeated.returncode == 1 and "phase a: 2 timing lines" in repeated.stderr
    assert check(tmp_path, line.format("b") + line.format("a") + total, "a", "b").returncode == 0
    no_total = check(tmp_path, line.format("a") + line.format("b"), "a", "b")
    assert no_total.returncode == 1 and "all phases" in no_total.stderr


def made_phases(target):
    """The phases `make TARGET` hands scripts/timed_phases.sh, from make's dry run."""
    dry_run = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), target], capture_output=True, text=True, check=True)
    command = shlex.split(dry_run.stdout.replace("\\\n", " "))
    start = next(i for i, word in enumerate(command) if word.endswith("scripts/timed_phases.sh")) + 1
    return [name.rstrip("&") for name in command[start::2]]


def test_ci_checks_the_phases_the_makefile_runs():
    checks = re.findall(r"check_phase_lines\.py \"\$log\" (.*)", (ROOT / ".ci" / "run").read_text())
    assert len(checks) == 2, f".ci/run checks the phase lines {len(checks)} times, not after make test and make test-slow"
    made = made_phases("test")
    assert sorted(checks[0].split()) == sorted(made), f".ci/run checks {checks[0]}, make test runs {made}"
    assert sorted(made) == sorted(["build", "cpu", "asan", "tsan", "pytest"]), made
    slow = made_phases("test-slow")
    assert sorted(checks[1].split()) == sorted(slow), f".ci/run checks {checks[1]}, make test-slow runs {slow}"
    assert sorted(slow) == ["slow", "wheel"], slow
