"""scripts/ship_tables.py: which tables of a GPU run may ship, with a stand-in for `volt8 models`."""
import json
import os
import stat
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "ship_tables.py")
# One model, hidden 2048 and intermediate 512, split by the TP size (gate_up tables: N = 2 I).
STAND_IN = """#!/bin/sh
[ "$1" = models ] && [ "$2" = --tp ] || exit 2
echo "toy tp=$3 rank=0 hidden=2048,intermediate=$((512 / $3)),num_experts=8,block_n=128,block_k=128,intermediate_offset=0"
"""


def table(op, n, k, arch="sm_90", measured=True, m=(1, 2, 4, 8, 16, 32, 64, 128)):
    body = {"__metadata__": {"op": op, "N": n, "K": k, "arch": arch, "measured": measured}}
    body.update({str(value): {"variant": f"{op}.cc.bm1.bn4.w4.sk1"} for value in m})
    return body


def run(tmp_path, tables, *extra):
    volt8 = tmp_path / "volt8"
    volt8.write_text(STAND_IN)
    volt8.chmod(volt8.stat().st_mode | stat.S_IXUSR)
    run_dir, into = tmp_path / "run", tmp_path / "into"
    run_dir.mkdir()
    into.mkdir()
    for name, body in tables.items():
        (run_dir / name).write_text(body if isinstance(body, str) else json.dumps(body))
    result = subprocess.run([sys.executable, SCRIPT, str(run_dir), "--into", str(into), "--volt8", str(volt8), *extra],
                            capture_output=True, text=True)
    return result, sorted(os.listdir(into))


def test_complete_tables_of_model_shapes_ship_and_the_rest_say_why_not(tmp_path):
    tables = {"a.json": table("gate_up", 256, 2048), "b.json": table("down", 2048, 64),
              "c.json": table("down", 2048, 128, m=(1, 2, 4, 8, 16, 32)),
              "d.json": table("down", 2048, 256, measured=False), "e.json": table("down", 2048, 512, arch="sm_70"),
              "f.json": table("gate_up", 128 * 3, 2048), "g.json": table("gate_up", 64, 2048)}
    result, shipped = run(tmp_path, tables)
    assert result.returncode == 0, result.stderr
    assert shipped == ["a.json", "b.json"]
    out = result.stdout
    assert "copied a.json" in out and "copied b.json" in out
    assert "skipped c.json: M 64,128 not measured (a tune cut short)" in out
    assert "skipped d.json: not measured" in out
    assert "skipped e.json: the compute_70 PTX timed on another GPU" in out
    assert "skipped f.json: op gate_up N 384 K 2048 is no registry model's rank shape" in out
    # N = I of a rank (64 at TP8) is not a gate_up table's N, which counts both row kinds
    assert "skipped g.json: op gate_up N 64 K 2048 is no registry model's rank shape" in out


def test_dry_run_copies_nothing_and_an_unreadable_table_fails(tmp_path):
    result, shipped = run(tmp_path, {"a.json": table("gate_up", 256, 2048), "z.json": "{not json"}, "--dry-run")
    assert result.returncode == 1
    assert shipped == []
    assert "would copy a.json" in result.stdout and "unreadable z.json" in result.stdout


def test_merge_adds_new_token_counts_once_and_leaves_a_seeded_copy_alone(tmp_path):
    seed_run = {"date": "2026-12-06T04:22:49Z", "command": "volt8 tune --m 256", "m": [256]}
    shipped = table("down", 2048, 64, m=(256,))
    shipped["__metadata__"]["runs"] = [seed_run]
    # The run's table: the shipped one it was seeded with, plus M = 512 from a later tune.
    later_run = {"date": "2026-12-06T06:00:00Z", "command": "volt8 tune --m 256,512 --resume 1", "m": [512]}
    grown = table("down", 2048, 64, m=(256, 512))
    grown["__metadata__"]["runs"] = [seed_run, later_run]
    run(tmp_path, {"a.json": grown, "b.json": shipped}, "--merge")  # into/ was empty: both are copied
    into = tmp_path / "into"
    # Merged again into what now ships, each adds nothing.
    result = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "run"), "--into", str(into), "--volt8",
                             str(tmp_path / "volt8"), "--merge"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "unchanged a.json" in result.stdout and "unchanged b.json" in result.stdout
    # A shipped table holding the seed alone takes the later run's M = 512 and its run, once each.
    (into / "a.json").write_text(json.dumps(shipped))
    result = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "run"), "--into", str(into), "--volt8",
                             str(tmp_path / "volt8"), "--merge"], capture_output=True, text=True)
    assert "merged a.json: M 512 of the run" in result.stdout, result.stdout
    merged = json.loads((into / "a.json").read_text())
    assert merged["__metadata__"]["runs"] == [seed_run, later_run]
    assert sorted(key for key in merged if key != "__metadata__") == ["256", "512"]


def test_a_seeded_copy_does_not_undo_another_calls_merge(tmp_path):
    seed_run = {"date": "2026-12-06T04:22:49Z", "command": "volt8 tune --m 256,512", "m": [256, 512]}
    seeded = table("down", 2048, 64, m=(256, 512))
    seeded["__metadata__"]["runs"] = [seed_run]
    # Two calls seeded with the same table: the first measured this shape again, the second another
    # shape, so its copy of this one holds the seed alone.
    again_run = {"date": "2026-12-06T10:53:40Z", "command": "volt8 tune --m 256,512 (again)", "m": [256, 512]}
    again = table("down", 2048, 64, m=(256, 512))
    again["__metadata__"]["runs"] = [seed_run, again_run]
    for key in ("256", "512"):
        again[key] = {"variant": "down.raw.bm64.bn128.w4.sk1.o2.f256"}
    # A third call measured M = 512 of this shape after the seed: its 256 entry is the seed's.
    later_run = {"date": "2026-12-06T11:30:00Z", "command": "volt8 tune --m 512", "m": [512]}
    later = table("down", 2048, 64, m=(256, 512))
    later["__metadata__"]["runs"] = [seed_run, later_run]
    later["512"] = {"variant": "down.raw.bm128.bn128.w4.sk1.o2.f256"}
    into = tmp_path / "into"
    run(tmp_path, {"a.json": seeded}, "--merge")  # what ships: the seed
    args = ["--into", str(into), "--volt8", str(tmp_path / "volt8"), "--merge"]
    for body in (again, seeded, later):
        (tmp_path / "run" / "a.json").write_text(json.dumps(body))
        result = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "run"), *args], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    shipped = json.loads((into / "a.json").read_text())
    # The second call's seed copy changed nothing; the third took its M = 512 alone.
    assert shipped["256"]["variant"] == "down.raw.bm64.bn128.w4.sk1.o2.f256"
    assert shipped["512"]["variant"] == "down.raw.bm128.bn128.w4.sk1.o2.f256"
    runs = shipped["__metadata__"]["runs"]
    assert sorted(runs, key=lambda item: item["date"]) == [seed_run, again_run, later_run] and len(runs) == 3


def test_a_run_taken_back_does_not_return_with_a_later_calls_seed(tmp_path):
    old_run = {"date": "2026-12-06T04:22:49Z", "command": "volt8 tune --m 256,512", "m": [256, 512]}
    shipped = table("down", 2048, 64, m=(256, 512))
    shipped["__metadata__"]["runs"] = [old_run]
    # A call measured M = 512 again and was merged, then taken back (git checkout): it lives on in the
    # seed of the next call, which measured M = 256 only.
    taken_back = {"date": "2026-12-06T12:16:34Z", "command": "volt8 tune --m 512", "m": [512]}
    seed = table("down", 2048, 64, m=(256, 512))
    seed["__metadata__"]["runs"] = [old_run, taken_back]
    seed["512"] = {"variant": "down.raw.bm128.bn128.w4.sk1.o2.f256"}
    new_run = {"date": "2026-12-06T12:39:19Z", "command": "volt8 tune --m 256", "m": [256]}
    tuned = json.loads(json.dumps(seed))
    tuned["__metadata__"]["runs"].append(new_run)
    tuned["256"] = {"variant": "down.raw.bm64.bn128.w4.sk1.o4.f256"}
    run(tmp_path, {"a.json": tuned})  # the run folder and the stand-in volt8
    (tmp_path / "into_explicit").mkdir()
    for into in ("into", "into_explicit"):
        (tmp_path / into / "a.json").write_text(json.dumps(shipped))
    (tmp_path / "tables_seed").mkdir()
    (tmp_path / "tables_seed" / "a.json").write_text(json.dumps(seed))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a.json").write_text(json.dumps(seed))
    # tables_seed beside the run folder, then --seed naming a folder anywhere
    for into, extra in (("into", []), ("into_explicit", ["--seed", str(tmp_path / "elsewhere")])):
        result = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "run"), "--into", str(tmp_path / into),
                                 "--volt8", str(tmp_path / "volt8"), "--merge", *extra], capture_output=True, text=True)
        assert result.returncode == 0 and "merged a.json: M 256 of the run" in result.stdout, result.stdout + result.stderr
        if into == "into":
            (tmp_path / "tables_seed" / "a.json").unlink()
    for into in ("into", "into_explicit"):
        merged = json.loads((tmp_path / into / "a.json").read_text())
        assert merged["256"]["variant"] == "down.raw.bm64.bn128.w4.sk1.o4.f256"
        assert merged["512"] == shipped["512"]
        assert merged["__metadata__"]["runs"] == [old_run, new_run]


def test_a_seed_folder_that_is_not_one_is_named(tmp_path):
    result, _ = run(tmp_path, {"a.json": table("down", 2048, 64)}, "--merge", "--seed", str(tmp_path / "nowhere"))
    assert result.returncode == 2 and f"--seed {tmp_path / 'nowhere'} is not a folder" in result.stderr


def test_an_unreadable_shipped_table_is_named_and_left_as_it_is(tmp_path):
    into = tmp_path / "into"
    into.mkdir()
    (into / "a.json").write_text("{not json")
    volt8 = tmp_path / "volt8"
    volt8.write_text(STAND_IN)
    volt8.chmod(volt8.stat().st_mode | stat.S_IXUSR)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "a.json").write_text(json.dumps(table("gate_up", 256, 2048)))
    result = subprocess.run([sys.executable, SCRIPT, str(run_dir), "--into", str(into), "--volt8", str(volt8), "--merge"],
                            capture_output=True, text=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"unreadable shipped {into / 'a.json'}" in result.stdout
    assert (into / "a.json").read_text() == "{not json"
