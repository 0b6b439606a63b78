"""scripts/gpu_check.sh's models_bench phase, with stand-ins for volt8 bench, mma_peak and
nvidia-smi: each model's TP4 and TP8 reports land in logs/, and logs/large_m.md holds
scripts/large_m_table.py's table against the peak that the carried mma_peak measured, or BENCH_PEAK."""
import pathlib
import shutil
import subprocess
import tarfile

from gpu_check_stand_ins import fake_gpu_env

ROOT = pathlib.Path(__file__).resolve().parents[2]

# volt8 bench --json FILE: a report with one M, its time set by the rank's TP.
VOLT8 = """#!/bin/sh
json=""; tp=""
while [ $# -gt 0 ]; do
  case "$1" in --json) json="$2"; shift ;; --tp) tp="$2"; shift ;; esac
  shift
done
cat >"$json" <<JSON
{"command": "volt8 bench --model toy --tp $tp", "device": {"copy_gbps": 2000.0},
 "shape": {"hidden": 1024, "intermediate": 128, "top_k": 8},
 "results": [{"m": 4096, "volt8": {"ran": true, "median_us": $((tp * 25)).0},
              "cublas_grouped_fp16": {"ran": true, "median_us": 150.0}}]}
JSON
echo "bench ran"
"""


def run_phase(tmp_path, with_probe, **env_extra):
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    for name in ("gpu_check.sh", "large_m_table.py", "regular_file.py", "tunelog.py"):
        shutil.copy(ROOT / "scripts" / name, tree / "scripts" / name)
    carry_bin = tree / ".carry" / "bin"
    carry_bin.mkdir(parents=True)
    (carry_bin / "volt8").write_text(VOLT8)
    (carry_bin / "volt8").chmod(0o755)
    if with_probe:
        (carry_bin / "mma_peak").write_text("#!/bin/sh\necho 'peak m16n8k16 registers 500.0 TFLOP/s at 1 MHz'\n")
        (carry_bin / "mma_peak").chmod(0o755)
    out = tmp_path / "out"
    env = fake_gpu_env(tmp_path, OUT=str(out), MODELS="toy", **env_extra)
    result = subprocess.run(["bash", str(tree / "scripts" / "gpu_check.sh"), "run", "models_bench"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    with tarfile.open(out / "logs.tgz") as archive:
        names = archive.getnames()
        table = archive.extractfile("logs/large_m.md").read().decode() if "logs/large_m.md" in names else None
    return result, names, table


def test_the_table_against_the_carried_peak(tmp_path):
    _, names, table = run_phase(tmp_path, with_probe=True)
    assert "logs/bench.toy.tp4.json" in names and "logs/bench.toy.tp8.json" in names
    # 25.77 GFLOP in 100 us (TP4) and 200 us (TP8) against 500 TFLOP/s
    assert "| toy TP4 | 100 us, 1.50x B (51.5%) |" in table, table
    assert "| toy TP8 | 200 us, 0.75x B (25.8%) |" in table, table
    assert "best share of the 500.0 TFLOP/s peak at M >= 4096: 51.5% (toy TP4 M = 4096; goal 60%)" in table


def test_bench_peak_and_no_peak(tmp_path):
    _, _, table = run_phase(tmp_path / "given", with_probe=True, BENCH_PEAK="250")
    assert "| toy TP4 | 100 us, 1.50x B (103.1%) |" in table, table
    result, names, table = run_phase(tmp_path / "none", with_probe=False)
    assert table is None and "logs/bench.toy.tp4.json" in names
    assert "no large_m.md (no peak: BENCH_PEAK, or prepare with PROBE=1)" in result.stdout
