"""scripts/fallback_distance.py and scripts/fallback_eval.py on small hand-made tune logs; the
evaluator asks a stand-in for the volt8 command, which fails when a shape's own table was not left
out (tests/test_list_choice.c checks the real `volt8 list --choice --tables`)."""
import json
import os
import pathlib
import stat
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]
G0, G1 = "gate_up.hmma.bm1.bn8.w8.sk8.f128", "gate_up.hmma.bm1.bn16.w4.sk4"
D0, D1 = "down.hmma.bm1.bn128.w4.sk1", "down.hmma.bm1.bn64.w4.sk1.f128"


def shape(label, hidden, intermediate):
    return {"kind": "shape", "label": label, "hidden": hidden, "intermediate": intermediate, "num_experts": 128,
            "intermediate_offset": 0, "block_n": 128, "block_k": 128, "top_k": 8, "arch": 90, "measured": 1,
            "device": "test"}


def measure(m, op, variant, us, held, accepted=1):
    return {"kind": "measure", "m": m, "op": op, "variant": variant, "held": held, "pass": "screen", "batches": 8,
            "accepted": accepted, "forward_us": us if accepted else None, "relative_l2": None}


def one_m(m, dispatch, gate_up_times, picked_gate_up, down_times, picked_down):
    records = [{"kind": "m", "m": m, "dispatch_gate_up": dispatch[0], "dispatch_down": dispatch[1]}]
    records += [measure(m, "gate_up", v, us, dispatch[1]) for v, us in gate_up_times.items()]
    records.append({"kind": "pick", "m": m, "op": "gate_up", "variant": picked_gate_up, "forward_us": 0})
    records += [measure(m, "down", v, us, picked_gate_up) for v, us in down_times.items()]
    records.append({"kind": "pick", "m": m, "op": "down", "variant": picked_down, "forward_us": 0})
    return records


def write_log(tmp_path):
    records = [shape("glm-4.5-air tp8 rank 1", 4096, 176)]
    # M = 1: the fallback's G0 + D0 at 12 us, the tuned G1 + D1 at 10 us: +20%
    records += one_m(1, (G0, D0), {G0: 12.0, G1: 10.0}, G1, {D0: 10.5, D1: 10.0}, D1)
    # M = 8: the dispatch's gate_up is not a candidate of this shape
    records += one_m(8, ("gate_up.mma.bm8.bn16.w2.sk1", D0), {G1: 20.0}, G1, {D0: 20.0}, D0)
    records.append(shape("qwen3-next tp4 rank 1", 2048, 128))
    records += one_m(1, (G1, D1), {G0: 9.0, G1: 8.0}, G1, {D0: 8.4, D1: 8.0}, D1)  # the fallback is the tuned pair
    path = tmp_path / "tune.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


def run(script, *args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_distance_flags_the_fallback_over_fifteen_percent(tmp_path):
    result = run("fallback_distance.py", write_log(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    glm = next(line for line in lines if line.startswith("glm-4.5-air tp8 rank 1") and "M=1 " in line)
    assert "12.00" in glm and "10.00" in glm and "+20.0%" in glm and "> 15%" in glm
    qwen = next(line for line in lines if line.startswith("qwen3-next"))
    assert "+0.0%" in qwen and "> 15%" not in qwen
    assert "gate_up.mma.bm8.bn16.w2.sk1 was not among the candidates timed" in result.stdout
    assert "1 of 2 points over" in result.stdout
    markdown = run("fallback_distance.py", write_log(tmp_path), "--markdown", "--m", "1")
    assert "| glm-4.5-air tp8 rank 1 | 1 | %s / %s | 12.00 | %s / %s | 10.00 | +20.0%% | > 15%% |" % (G0, D0, G1, D1) \
        in markdown.stdout
    assert "M=8" not in markdown.stdout and "| 8 |" not in markdown.stdout


def test_logs_of_one_shape_join_a_later_m_replacing_the_same_m(tmp_path):
    """A tune resumed over two calls: the second log's M = 1 (the fallback now the tuned pair) replaces
    the first's (+20%), and the first's M = 8 stays."""
    first = write_log(tmp_path)
    later = tmp_path / "later.jsonl"
    records = [shape("glm-4.5-air tp8 rank 1", 4096, 176), {"kind": "resume", "m": 8}]
    records += one_m(1, (G1, D1), {G0: 12.0, G1: 10.0}, G1, {D0: 10.5, D1: 10.0}, D1)
    later.write_text("".join(json.dumps(record) + "\n" for record in records))
    result = run("fallback_distance.py", first, later)
    assert result.returncode == 0, result.stderr
    glm = [line for line in result.stdout.splitlines() if line.startswith("glm-4.5-air tp8 rank 1")]
    assert any("M=1 " in line and "+0.0%" in line for line in glm), result.stdout
    assert not any("+20.0%" in line for line in glm), result.stdout
    assert "gate_up.mma.bm8.bn16.w2.sk1 was not among the candidates timed" in result.stdout


def test_a_kept_served_pair_is_the_tuned_pair(tmp_path):
    """The tuner kept the served pair (G0, D0) over its picks (G1, D1): the distance is 0, not the +20% the
    picks' screen times give."""
    path = tmp_path / "kept.jsonl"
    records = [shape("glm-4.5-air tp8 rank 1", 4096, 176)]
    records += one_m(1, (G0, D0), {G0: 12.0, G1: 10.0}, G1, {D0: 10.5, D1: 10.0}, D1)
    records.append({"kind": "kept", "m": 1, "gate_up": G0, "down": D0, "forward_us": 9.9, "tuned_gate_up": G1,
                    "tuned_down": D1, "tuned_us": 10.1})
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    result = run("fallback_distance.py", path, "--markdown")
    assert result.returncode == 0, result.stderr
    assert "| glm-4.5-air tp8 rank 1 | 1 | %s / %s | 12.00 | %s / %s | 12.00 | +0.0%% |" % (G0, D0, G0, D0) \
        in result.stdout, result.stdout
    # The evaluator: the stand-in's G0 + D1, 12 + 10 - 10 = 12 us, against the kept pair's 12 (G0 | D0), not 10.
    tables, volt8 = stand_in(tmp_path)
    result = run("fallback_eval.py", "--tables", tables, "--volt8", volt8, path)
    assert result.returncode == 0, result.stderr
    glm = next(line for line in result.stdout.splitlines() if line.startswith("glm"))
    assert "+0.0%" in glm and "+20.0%" not in glm, result.stdout


def test_a_fifo_for_a_log_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "tune.jsonl"
    os.mkfifo(fifo)
    result = run("fallback_distance.py", fifo)
    assert result.returncode == 2 and "is not a regular file" in result.stderr, result.stderr


STAND_IN = textwrap.dedent("""\
    #!%s
    import os, sys
    args = sys.argv[1:]
    value = lambda flag: args[args.index(flag) + 1]
    shape = dict(item.split("=") for item in value("--shape").split(","))
    own = "op=down,N=%%s,K=%%s," %% (shape["hidden"], shape["intermediate"])
    if any(name.startswith(own) for name in os.listdir(value("--tables"))):
        sys.exit("own table not left out")
    assert args[:3] == ["list", "--arch", "sm_90"] and value("--top-k") == "8", args
    for m in value("--choice").split(","):
        print(m, "%s", "%s")  # the rule under test: G0 with the tuned down
    """) % (sys.executable, G0, D1)


def stand_in(tmp_path):
    """A tables folder with the two shapes' own tables and one other, and the stand-in volt8."""
    tables = tmp_path / "tables"
    tables.mkdir()
    for name in ("op=down,N=4096,K=176,block=128x128,arch=sm_90,device=NVIDIA_H200.json",
                 "op=gate_up,N=352,K=4096,block=128x128,arch=sm_90,device=NVIDIA_H200.json",
                 "op=down,N=2048,K=128,block=128x128,arch=sm_90,device=NVIDIA_H200.json"):
        (tables / name).write_text("{}")
    volt8 = tmp_path / "volt8"
    volt8.write_text(STAND_IN)
    volt8.chmod(volt8.stat().st_mode | stat.S_IXUSR)
    return tables, volt8


def test_eval_leaves_the_own_tables_out_and_estimates_by_additivity(tmp_path):
    tables, volt8 = stand_in(tmp_path)
    result = run("fallback_eval.py", "--tables", tables, "--volt8", volt8, "--m", "1", write_log(tmp_path))
    assert result.returncode == 0, result.stderr
    # glm: G0 | D0 12 + D1 | G1 10 - G1 | D0 10 = 12 against 10; qwen: 9 + 8 - 8 = 9 against 8
    glm = next(line for line in result.stdout.splitlines() if line.startswith("glm"))
    assert "12.00" in glm and "+20.0%" in glm
    qwen = next(line for line in result.stdout.splitlines() if line.startswith("qwen"))
    assert "9.00" in qwen and "+12.5%" in qwen and "> 15%" not in qwen
    assert "estimated from the log" in result.stdout
    assert sorted(os.listdir(tables)) and len(os.listdir(tables)) == 3, "the tables folder is left as it was"


def test_eval_says_when_the_library_fails(tmp_path):
    volt8 = tmp_path / "volt8"
    volt8.write_text("#!/bin/sh\necho 'volt8 list: broken' >&2\nexit 1\n")
    volt8.chmod(volt8.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "tables").mkdir()
    result = run("fallback_eval.py", "--tables", tmp_path / "tables", "--volt8", volt8, write_log(tmp_path))
    assert result.returncode == 2 and "volt8 list: broken" in result.stderr
