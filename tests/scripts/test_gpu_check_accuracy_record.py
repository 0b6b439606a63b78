"""scripts/gpu_check.sh's accuracy_record phase, with a stand-in for gpu_test_accuracy: each mode of
SUITE_MODES records into one file that starts as the committed tests/gpu/accuracy_figures.json, so a
mode left out keeps what the file held, and the result comes back as $OUT/accuracy_figures.json; a suites
phase after it in the same call checks against that file, one without it against the committed one; a
run whose carry lacks the suite says so."""
import json
import pathlib
import shutil
import subprocess
import tarfile

from gpu_check_stand_ins import fake_gpu_env

ROOT = pathlib.Path(__file__).resolve().parents[2]

# gpu_test_accuracy with VOLT8_ACCURACY_RECORD=FILE: one family's figure for the mode's arch.
SUITE = """#!/bin/sh
arch="${VOLT8_TARGET_ARCH:-sm_90}"
if [ -z "${VOLT8_ACCURACY_RECORD:-}" ]; then
  echo "checked against ${VOLT8_ACCURACY_FIGURES:-the committed figures}"
  exit 0
fi
python3 - "$VOLT8_ACCURACY_RECORD" "$arch" <<'PY'
import json, sys
path, arch = sys.argv[1:]
data = json.load(open(path))
data["figures"].setdefault(arch, {})["cc"] = 2.0e-4 if arch == "sm_70" else 2.1e-4
json.dump(data, open(path, "w"))
PY
echo "cc on $arch: relative L2 (recorded)"
echo "[====] Synthesis: Tested: 1 | Passing: 1 | Failing: 0 | Crashing: 0"
"""


def run_phase(tmp_path, carry_suite=True, phases=("accuracy_record",), **env_extra):
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    for name in ("gpu_check.sh", "venv_nvrtc.sh"):
        shutil.copy(ROOT / "scripts" / name, tree / "scripts" / name)
    (tree / "tests" / "gpu").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "gpu" / "accuracy_figures.json", tree / "tests" / "gpu")
    carry_bin = tree / ".carry" / "bin"
    carry_bin.mkdir(parents=True)
    if carry_suite:
        (carry_bin / "gpu_test_accuracy").write_text(SUITE)
        (carry_bin / "gpu_test_accuracy").chmod(0o755)
    out = tmp_path / "out"
    env = fake_gpu_env(tmp_path, OUT=str(out), **env_extra)
    result = subprocess.run(["bash", str(tree / "scripts" / "gpu_check.sh"), "run", *phases], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result, out


def test_both_modes_record_into_one_file(tmp_path):
    result, out = run_phase(tmp_path)
    figures = json.loads((out / "accuracy_figures.json").read_text())["figures"]
    assert figures["sm_70"]["cc"] == 2.0e-4 and figures["sm_90"]["cc"] == 2.1e-4, figures
    assert figures["sm_90"]["raw"] is None, "families the stand-in did not measure keep their value"
    assert "accuracy_record.sm70_ptx" in result.stdout and "accuracy_record.native" in result.stdout


def test_a_mode_left_out_keeps_the_committed_figures(tmp_path):
    _, out = run_phase(tmp_path, SUITE_MODES="native")
    figures = json.loads((out / "accuracy_figures.json").read_text())["figures"]
    committed = json.loads((ROOT / "tests" / "gpu" / "accuracy_figures.json").read_text())["figures"]
    assert figures["sm_70"] == committed["sm_70"]
    assert figures["sm_90"]["cc"] == 2.1e-4


def test_without_the_suite_it_says_so(tmp_path):
    result, out = run_phase(tmp_path, carry_suite=False)
    assert "accuracy_record: gpu_test_accuracy was not carried" in result.stdout
    assert not (out / "accuracy_figures.json").exists()


def suite_logs(out):
    with tarfile.open(out / "logs.tgz") as archive:
        return {name: archive.extractfile(name).read().decode() for name in archive.getnames()
                if name.startswith("logs/accuracy.")}


def test_the_suites_check_against_this_calls_record(tmp_path):
    _, out = run_phase(tmp_path / "with", phases=("accuracy_record", "suites"))
    logs = suite_logs(out)
    assert set(logs) == {"logs/accuracy.sm70_ptx.log", "logs/accuracy.native.log"}, logs
    assert all("checked against " in text and text.strip().endswith("/logs/accuracy_figures.json") for text in logs.values())
    _, out = run_phase(tmp_path / "without", phases=("suites",))
    assert all("checked against the committed figures" in text for text in suite_logs(out).values())
