"""scripts/large_m_table.py on hand-made bench reports: the table's cells and shares, the targets'
counts, the top-k sum's bound worked by hand, the peak read from mma_peak's output, and bad input
(a FIFO, a report that is not one, a peak file without its line)."""
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def report(tmp_path, name, model, tp, times, hidden=1024, intermediate=128, top_k=8, copy_gbps=2000.0):
    """A bench report: `times` maps M to (volt8 us, B us or None), or (volt8, B, C us or None)."""
    results = []
    for m, entry in times.items():
        volt8, baseline = entry[:2]
        result = {"m": m, "volt8": {"ran": True, "median_us": volt8},
                  "cublas_grouped_fp16": {"ran": baseline is not None, "median_us": baseline}}
        if len(entry) > 2:
            result["sorted_padded_fp16"] = {"ran": entry[2] is not None, "median_us": entry[2]}
        results.append(result)
    data = {"schema": "volt8-bench/1", "command": f"volt8 bench --model {model} --tp {tp} --m 64",
            "device": {"name": "test", "copy_gbps": copy_gbps},
            "shape": {"hidden": hidden, "intermediate": intermediate, "top_k": top_k}, "results": results}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def run(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "large_m_table.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_table_targets_and_the_sums_bound(tmp_path):
    # FLOP at M = 4096: 2 x 4096 x 8 x 1024 x 128 x 3 = 25.77 GFLOP; at 100 us, 257.7 TFLOP/s
    first = report(tmp_path, "a.json", "small", 4, {64: (10.0, 30.0), 1024: (50.0, 60.0), 2048: (40.0, 30.0),
                                                    4096: (100.0, 150.0)})
    second = report(tmp_path, "b.json", "other", 8, {64: (10.0, None), 128: (20.0, 30.0)})
    result = run(first, second, "--peak", "500")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "| rank | M = 64 | M = 128 | M = 1024 | M = 2048 | M = 4096 |"
    assert lines[2] == "| small TP4 | 10 us, 3.00x B | - | 50 us, 1.20x B | 40 us, 0.75x B | 100 us, 1.50x B (51.5%) |"
    assert lines[3] == "| other TP8 | 10 us | 20 us, 1.50x B | - | - | - |"
    assert "1.3x B at M = 128..1024: 1 of 2 points (lowest small TP4 M = 1024, 1.20x)" in lines
    assert "1.0x B at M = 2048..: 1 of 2 points (lowest small TP4 M = 2048, 0.75x)" in lines
    assert "small TP4: M = 2048 takes 4.00x the time of M = 64 (target 3x)" in lines
    assert "best share of the 500.0 TFLOP/s peak at M >= 4096: 51.5% (small TP4 M = 4096; goal 60%)" in lines
    # the sum: (4096 x 8 + 4096) x 1024 x 2 bytes = 75.5 MB, 37.7 us at 2000 GB/s; at the peak the
    # GEMMs take 51.54 us, so for 60% they have 85.90 - 37.75 = 48.15 us: 107% of the peak
    assert ("small TP4 M = 4096: the top-k sum 0.08 GB, at least 38 us at 2000 GB/s; for 60% the GEMMs need "
            "107% of the peak (out of reach), now 83%") in lines
    assert not any(line.startswith("other TP8 M = 128") for line in lines)  # below --share-from
    # with a lower goal the same rank can: 51.54 / (51.54 / 0.4 - 37.75) = 56.6%
    result = run(first, "--peak", "500", "--goal", "40")
    assert "for 40% the GEMMs need 57% of the peak, now 83%" in result.stdout


def test_the_sorted_peer_beside_b(tmp_path):
    path = report(tmp_path, "a.json", "small", 4, {1024: (50.0, 60.0, 75.0), 4096: (100.0, 150.0, None)})
    result = run(path, "--peak", "500")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2] == "| small TP4 | 50 us, 1.20x B, 1.50x C | 100 us, 1.50x B (51.5%) |"


def test_peak_from_mma_peaks_output(tmp_path):
    path = report(tmp_path, "a.json", "small", 4, {4096: (100.0, 150.0)})
    peak = tmp_path / "mma_peak.txt"
    peak.write_text("NVIDIA H100, sm_90, 132 SMs\npeak m16n8k16 registers 250.0 TFLOP/s at 1980 MHz (1 FLOP/clk/SM)\n")
    result = run(path, "--peak-file", peak)
    assert result.returncode == 0, result.stderr
    assert "(103.1%)" in result.stdout
    peak.write_text("nothing measured\n")
    result = run(path, "--peak-file", peak)
    assert result.returncode == 2 and "has no line 'peak m16n8k16 registers" in result.stderr


def test_bad_input_is_named(tmp_path):
    good = report(tmp_path, "a.json", "small", 4, {4096: (100.0, 150.0)})
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    result = run(good, fifo, "--peak", "500")
    assert result.returncode == 2 and f"{fifo} is not a regular file" in result.stderr
    notes = tmp_path / "notes.json"
    notes.write_text(json.dumps({"results": []}))
    result = run(notes, "--peak", "500")
    assert result.returncode == 2 and f"{notes} is not a volt8 bench report" in result.stderr
    notes.write_text("{")
    result = run(notes, "--peak", "500")
    assert result.returncode == 2 and f"{notes} is not JSON" in result.stderr
    zero = report(tmp_path, "zero.json", "small", 4, {4096: (0.0, 150.0)})
    result = run(zero, "--peak", "500")
    assert result.returncode == 2 and "M = 4096 with times (0.0, 150.0, None): M and every time must be above 0" in result.stderr
    result = run(good, "--peak", "0")
    assert result.returncode == 2 and "--peak 0.0: must be above 0" in result.stderr
    result = run(good, "--peak", "500", "--goal", "120")
    assert result.returncode == 2 and "--goal 120.0" in result.stderr
    assert result.stdout == ""
