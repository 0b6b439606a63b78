"""The ranks of tests/engines/real_models.py, each its own process on one gloo group, for the engines'
test suites (tests/vllm, tests/onecat)."""
import json
import os
import socket
import subprocess
import sys
import time

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "real_models.py")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_ranks(tmp_path, tp, *extra, expect_error=None):
    """Every rank of TP `tp` in its own process; their results, each checked for a crash (or, with
    expect_error, for an error whose text holds it)."""
    port = free_port()
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    environ = {key: value for key, value in os.environ.items() if not key.startswith("VOLT8_VLLM")}
    processes = []
    for rank in range(tp):
        out = tmp_path / f"tp{tp}-rank{rank}.json"
        log = open(tmp_path / f"tp{tp}-rank{rank}.log", "w")
        processes.append((rank, out, log, subprocess.Popen(
            [sys.executable, WORKER, "--tp", str(tp), "--rank", str(rank), "--port", str(port), "--scratch",
             str(scratch), "--out", str(out), *extra], stdout=log, stderr=subprocess.STDOUT, env=environ)))
    # a rank that dies leaves the others waiting on the group for ever: stop them all at the first one
    deadline = time.monotonic() + 1800
    while any(process.poll() is None for *_, process in processes):
        dead = [(rank, process.returncode) for rank, out, _, process in processes
                if process.returncode is not None and (process.returncode != 0 or not out.exists())]
        if dead or time.monotonic() > deadline:
            for *_, process in processes:
                process.kill()
            break
        time.sleep(0.5)
    results = []
    for rank, out, log, process in processes:
        code = process.wait()
        log.close()
        tail = (tmp_path / f"tp{tp}-rank{rank}.log").read_text()[-3000:]
        assert code == 0 and out.exists(), f"rank {rank} of TP{tp} exited {code}:\n{tail}"
        result = json.loads(out.read_text())
        if expect_error is None:
            assert "error" not in result, f"rank {rank} of TP{tp}:\n{result['error']}"
        else:
            assert expect_error in result.get("error", ""), f"rank {rank} of TP{tp}: {result.get('error')}"
        results.append(result)
    return results


def expect_all_ok(results, count_per_rank=None):
    for result in results:
        failed = [check for check in result["checks"] if not check["ok"]]
        assert not failed, f"TP{result['tp']} rank {result['rank']}: " + "; ".join(
            f"{check['check']} ({check['detail']})" for check in failed)
        if count_per_rank is not None:
            assert len(result["checks"]) == count_per_rank, [check["check"] for check in result["checks"]]
