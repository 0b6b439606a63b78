"""scripts/gpu_check.sh's ab phase, with stand-ins for the two builds' volt8 and for nvidia-smi: each
round runs both builds, the order swapped from one round to the next, and logs/ab.txt gives each
round's times side by side."""
import pathlib
import shutil
import subprocess
import tarfile

from gpu_check_stand_ins import fake_gpu_env

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A bench table as volt8 bench --no-baselines prints it; the stand-in also notes that it ran.
BENCH = """#!/bin/sh
echo "{name}" >>"{order}"
echo "    M sets active floor_us |  volt8_us    GB/s  %copy   rel_l2"
echo "  512    4  256.0   1053.6 |    {small}     876  31.4%  5.3e-04"
echo "16384    4  256.0   1053.6 |    {large}     876  31.4%  5.3e-04"
"""


def test_each_round_swaps_which_build_runs_first(tmp_path):
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "gpu_check.sh", tree / "scripts" / "gpu_check.sh")
    order = tmp_path / "order.txt"
    for build, small, large in (("bin", "100.0", "300.0"), ("ab", "200.0", "400.0")):
        folder = tree / ".carry" / build
        folder.mkdir(parents=True)
        volt8 = folder / "volt8"
        volt8.write_text(BENCH.format(name=build, order=order, small=small, large=large))
        volt8.chmod(0o755)
    (tree / ".carry" / "ab" / "commit.txt").write_text("abc1234 the other build\n")
    out = tmp_path / "out"
    env = fake_gpu_env(tmp_path, OUT=str(out), AB_TEST="0", AB_MODELS="toy:4", AB_M="512,16384", AB_ROUNDS="3")
    result = subprocess.run(["bash", str(tree / "scripts" / "gpu_check.sh"), "run", "ab"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert order.read_text().split() == ["bin", "ab", "ab", "bin", "bin", "ab"]
    with tarfile.open(out / "logs.tgz") as archive:
        text = archive.extractfile("logs/ab.txt").read().decode()
    rounds = text.split("toy TP4, round ")[1:]
    assert [part.split(",")[0] for part in rounds] == ["1 (this build first)", "2 (the other first)",
                                                       "3 (this build first)"], text
    for part in rounds:
        assert "M = 512: 100.0 -> 200.0 us" in part and "M = 16384: 300.0 -> 400.0 us" in part, text
