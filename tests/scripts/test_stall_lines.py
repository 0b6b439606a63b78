"""scripts/stall_lines.py on hand-written `ncu --page source --csv` tables."""
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "stall_lines.py")
HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)",'
          '"Warp Stall Sampling (Not-issued Samples)","Instructions Executed"\n')


def run(tmp_path, text, *args):
    path = tmp_path / "source.csv"
    path.write_text(text)
    return subprocess.run([sys.executable, SCRIPT, str(path), *args], capture_output=True, text=True)


def test_lines_are_ranked_per_kernel_with_their_share(tmp_path):
    text = ('"Kernel Name","volt8_single"\n' + HEADER +
            '"0x10","FFMA R1, R2, R3, R1","50","10","6400"\n'
            '"0x20","LDG.E.128 R4, [R2.64]","1,200","1,100","64"\n'
            '"0x30","BAR.SYNC 0x0","250","240","64"\n'
            '"Kernel Name","volt8_reduce"\n' + HEADER +
            '"0x10","LDS R1, [R2]","10","5","1"\n')
    result = run(tmp_path, text, "--top", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "== Kernel Name volt8_single: 1500 samples over 3 SASS lines"
    assert lines[1].split()[:3] == ["80.00%", "1200", "1100"] and lines[1].endswith("LDG.E.128 R4, [R2.64]")
    assert lines[2].split()[:3] == ["16.67%", "250", "240"] and lines[2].endswith("BAR.SYNC 0x0")
    assert lines[3] == "== Kernel Name volt8_reduce: 10 samples over 1 SASS lines"
    assert len(lines) == 5


def test_a_table_without_not_issued_samples_and_without_a_name(tmp_path):
    text = '"Address","Source","Warp Stall Sampling (All Samples)"\n"0x10","EXIT","4"\n"0x20","BRA 0x10","12"\n'
    result = run(tmp_path, text)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["== kernel 1: 16 samples over 2 SASS lines",
                                          " 75.00%       12  BRA 0x10", " 25.00%        4  EXIT"]


def test_an_unknown_format_is_refused_naming_what_it_saw(tmp_path):
    result = run(tmp_path, '"Address","Instructions"\n"0x10","3"\n')
    assert result.returncode == 1
    assert 'no header with "Source"' in result.stderr and "Address, Instructions" in result.stderr


def test_bad_arguments(tmp_path):
    assert run(tmp_path, HEADER, "--top", "0").returncode == 2
    missing = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "none.csv")], capture_output=True, text=True)
    assert missing.returncode == 2 and "not a regular file" in missing.stderr


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "source.csv"
    os.mkfifo(fifo)
    result = subprocess.run([sys.executable, SCRIPT, str(fifo)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "not a regular file" in result.stderr
