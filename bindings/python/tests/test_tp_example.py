"""examples/tp_mtp_step.py without a GPU: its arguments, and its host-only check that the TP ranks'
partial outputs sum to the TP1 forward (the double-precision reference on the CPU, no torch)."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "examples", "tp_mtp_step.py")
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def load_example():
    spec = importlib.util.spec_from_file_location("tp_mtp_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example():
    return load_example()


def test_loading_forces_multicast_off(monkeypatch):
    for name in MULTICAST_OFF:
        monkeypatch.setenv(name, "7")
    load_example()
    assert {name: os.environ[name] for name in MULTICAST_OFF} == MULTICAST_OFF


@pytest.mark.parametrize("argv, message", [
    (["--shape", "hidden=abc"], "argument --shape: 'hidden=abc': 'abc' is not a positive integer"),
    (["--shape", "llama"], "'llama' is neither a shape name (reference, glm-4.5-air) nor key=value"),
    (["--shape", "depth=3"], "'depth=3': needs key=value, key one of hidden, intermediate, num_experts, top_k"),
    (["--shape", "hidden=2056"], "hidden=2056: volt8 needs a multiple of 16"),
    (["--shape", "num_experts=4"], "top_k=8: more than num_experts=4"),
    (["--tokens", "1,0,8"], "argument --tokens: '0' is not a positive integer"),
    (["--tokens", "8,x"], "argument --tokens: 'x' is not a positive integer"),
    (["--tp-size", "-2"], "argument --tp-size: '-2' is not a positive integer"),
    (["--tp-size", "3"], "--tp-size 3: intermediate 640 does not split into 3 slices of a multiple of 16"),
    (["--tp-size", "32", "--shape", "intermediate=256"], "--tp-size 32: intermediate 256 does not split into 32"),
    (["--repeats", "0"], "argument --repeats: '0' is not a positive integer"),
    (["--backend", "mpi"], "argument --backend: invalid choice: 'mpi'"),
    (["--checkpoint", "/nonexistent/ckpt"], "--checkpoint /nonexistent/ckpt: not a folder"),
])
def test_bad_arguments_exit_2_naming_the_value(example, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        example.parse_arguments(["--host-only"] + argv, environ={})
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_torchrun_environment(example, capsys):
    args = example.parse_arguments(["--shape", "glm-4.5-air,num_experts=12"], environ={"WORLD_SIZE": "4", "RANK": "1"})
    assert args.tp_size == 4 and not args.host_only and args.tokens == [1, 8, 64]
    assert args.shape == {"hidden": 4096, "intermediate": 1408, "num_experts": 12, "top_k": 8}
    with pytest.raises(SystemExit) as exit_info:
        example.parse_arguments(["--tp-size", "2"], environ={"WORLD_SIZE": "4", "RANK": "1"})
    assert exit_info.value.code == 2 and "--tp-size 2: torchrun started 4 processes" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        example.parse_arguments([], environ={})
    assert exit_info.value.code == 2 and "torchrun --nproc-per-node N, or pass --host-only" in capsys.readouterr().err


def errors_by_tokens(output):
    """M -> (float64 error, float16 error) from the host-only report."""
    pattern = r"M=(\d+): sum of \d+ partials against the TP1 reference: relative L2 (\S+) \(float64\), (\S+) \("
    return {int(m): (float(exact), float(half)) for m, exact, half in re.findall(pattern, output)}


# The reference shape at TP 2 and 4 (offsets 0/64 and 0/32/64/96), and 64-wide TP 8 slices at offsets 0 and 64.
HOST_CASES = [("num_experts=4,top_k=2", 2, [0, 64]), ("num_experts=4,top_k=2", 4, [0, 32, 64, 96]),
              ("hidden=2048,intermediate=512,num_experts=4,top_k=2", 8, [0, 64] * 4)]


@pytest.mark.parametrize("shape, tp_size, offsets", HOST_CASES, ids=[f"tp{case[1]}" for case in HOST_CASES])
def test_host_only_partials_sum_to_tp1(example, capsys, shape, tp_size, offsets):
    code = example.main(["--host-only", "--shape", shape, "--tp-size", str(tp_size), "--seed", "3"])
    output = capsys.readouterr().out
    assert code == 0, output
    width = (512 if "intermediate=512" in shape else 640) // tp_size
    planned = re.findall(r"planned rank (\d+): intermediate (\d+) at offset (\d+)", output)
    assert planned == [(str(rank), str(width), str(offset)) for rank, offset in enumerate(offsets)]
    errors = errors_by_tokens(output)
    assert sorted(errors) == [1, 8, 64]
    for tokens, (exact, half) in errors.items():
        assert exact <= 1e-12, f"M={tokens}: float64 sum {exact}"
        assert 1e-5 < half <= 1e-3, f"M={tokens}: float16 sums {half} (they round, so never exact)"
    assert output.rstrip().endswith("tp_mtp_step: ok (host only)")


def test_host_only_check_fails_on_a_wrong_slice(example, capsys, monkeypatch):
    """Every rank handed rank 0's slice: the sums no longer match, and the run says which check failed."""
    load = example.volt8.load_host_checkpoint
    monkeypatch.setattr(example.volt8, "load_host_checkpoint",
                        lambda folder, tp_size=1, tp_rank=0: load(folder, tp_size=tp_size, tp_rank=0))
    code = example.main(["--host-only", "--shape", "hidden=256,num_experts=3,top_k=2", "--tokens", "2"])
    captured = capsys.readouterr()
    assert code == 1
    assert "tp_mtp_step: FAILED: M=2: float64 partials against TP1: relative L2" in captured.err
    assert "tp_mtp_step: FAILED: M=2: float16 partials against TP1" in captured.err
    assert "ok" not in captured.out


def test_host_only_script_runs_without_torch():
    """As CI runs it: a plain process, and torch never imported."""
    code = ("import runpy, sys\n"
            f"sys.argv = [{SCRIPT!r}, '--host-only', '--shape', 'hidden=512,intermediate=256,num_experts=3,top_k=2',"
            " '--tp-size', '4', '--tokens', '1,5']\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit as done:\n    code = done.code\n"
            "print('torch imported' if 'torch' in sys.modules else 'no torch', code)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip().endswith("no torch 0"), run.stdout + run.stderr
    assert sorted(errors_by_tokens(run.stdout)) == [1, 5]


class HostTensor:
    """Stands in for a CUDA tensor in rank 0's checks: .cpu().numpy() gives the array."""

    def __init__(self, array):
        self.array = array

    def cpu(self):
        return self

    def numpy(self):
        return self.array


def test_rank0_checks_and_report(example, tmp_path, capsys):
    """The GPU run's checks on host arrays: a correct float16 sum passes, a sum missing a rank fails,
    and a replay that differs from eager is named with its rank."""
    folder = example.write_synthetic_checkpoint(str(tmp_path / "ckpt"), hidden=256, intermediate=256, num_experts=3)
    full = example.volt8.load_host_checkpoint(folder)
    ranks = [example.volt8.load_host_checkpoint(folder, tp_size=2, tp_rank=rank) for rank in range(2)]
    inputs = example.routed_inputs(256, 3, 2, 4, seed=1)
    partials = [example.volt8.reference_moe_forward(rank, *inputs) for rank in ranks]
    tp1 = type("TP1", (), {"forward": lambda self, *args: HostTensor(
        example.volt8.reference_moe_forward(full, *(a.array for a in args)).astype("float16"))})()

    def step(summed):
        return type("Step", (), {"summed": HostTensor(summed.astype("float16")), "x": HostTensor(inputs[0]),
                                 "ids": HostTensor(inputs[1]), "weights": HostTensor(inputs[2])})()

    failures = []
    line = example.rank0_checks(tp1, full, step(partials[0] + partials[1]), 4, failures)
    assert failures == [] and line.startswith("sum vs reference ")
    example.rank0_checks(tp1, full, step(partials[0]), 4, failures)
    assert [f.split(":")[1] for f in failures] == [" the sum against the float64 reference",
                                                   " the sum against the TP1 forward"]
    timing = {"forward_us": 10.0, "reduce_us": 20.0, "both_us": 31.0}
    results = [dict(timing, forward_bits=True, sum_bits=True, sum_difference=0.0),
               dict(timing, forward_bits=True, sum_bits=False, sum_difference=2e-4, both_us=33.0)]
    failures = []
    example.report_tokens(4, results, line, 50, failures)
    assert failures == ["M=4 rank 1: the graph's all-reduce differs from the eager one (relative L2 0.0002)"]
    output = capsys.readouterr().out
    assert "replay DIFFERENT to eager" in output
    assert "forward 10.0 us, all-reduce 20.0 us, forward + all-reduce 33.0 us (median of 50 replays" in output
