"""`python -m volt8 doctor`: the packaged command's report, then the Python side, and its exit status."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import BINDING_DIR, REPO_ROOT, TEST_INSTALLED

BUILT_COMMAND = os.path.join(REPO_ROOT, "build", "volt8")


@pytest.fixture
def package_path(tmp_path):
    """A PYTHONPATH whose volt8 package holds its volt8 command: the installed wheel's, or the source
    tree's package copied beside the build's command."""
    if TEST_INSTALLED:
        import volt8
        return os.path.dirname(os.path.dirname(os.path.abspath(volt8.__file__)))
    if not os.access(BUILT_COMMAND, os.X_OK):
        pytest.skip(f"no volt8 command at {BUILT_COMMAND} (build first)")
    shutil.copytree(os.path.join(BINDING_DIR, "volt8"), tmp_path / "volt8")
    os.makedirs(tmp_path / "volt8" / "bin")
    os.symlink(BUILT_COMMAND, tmp_path / "volt8" / "bin" / "volt8")
    return str(tmp_path)


def doctor(package_path, tmp_path, *arguments, extra_path=None):
    environment = dict(os.environ, VOLT8_DISABLE_CUDA="1", VOLT8_CACHE_DIR=str(tmp_path / "cache"),
                       PYTHONPATH=os.pathsep.join(filter(None, [extra_path, package_path])))
    return subprocess.run([sys.executable, "-m", "volt8", "doctor", *arguments], capture_output=True, text=True,
                          env=environment, cwd=tmp_path, timeout=120)


def test_doctor_reports_the_command_side_then_the_python_side(package_path, tmp_path):
    run = doctor(package_path, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    import volt8
    sections = ["volt8 doctor\n", f"library: volt8 {volt8.__version__}, ", "driver: none (",
                "NVRTC candidates, in search order", "  compute_70 (", f"kernel cache: {tmp_path / 'cache'}: not made yet",
                "tuning tables (", "python: libvolt8 ", "torch: ", "verdict: no GPU here"]
    at = 0
    for section in sections:
        found = run.stdout.find(section, at)
        assert found >= 0, f"{section!r} missing or out of order in:\n{run.stdout}"
        at = found
    # the command's note that it leaves torch to Python is replaced by the Python side's torch line
    assert "torch: not checked by this command" not in run.stdout, run.stdout
    assert run.stdout.count("\ntorch: ") == 1, run.stdout


def test_a_cache_path_cut_in_the_report_is_marked(package_path, tmp_path):
    long_dir = tmp_path / ("c" * 250) / ("a" * 250) / ("c" * 250) / ("h" * 250) / "e"
    environment = dict(os.environ, VOLT8_DISABLE_CUDA="1", VOLT8_CACHE_DIR=str(long_dir), PYTHONPATH=package_path)
    run = subprocess.run([sys.executable, "-m", "volt8", "doctor"], capture_output=True, text=True, env=environment,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    line = next(line for line in run.stdout.splitlines() if line.startswith("kernel cache: "))
    shown = line[len("kernel cache: "):].split(": not made yet")[0]
    assert len(str(long_dir)) > 1023 and shown.endswith("...") and len(shown) == 1023, line[:80]
    assert str(long_dir).startswith(shown[:-3])


def test_a_torch_that_does_not_import_fails_the_doctor(package_path, tmp_path):
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise RuntimeError('this torch is broken')\n")
    run = doctor(package_path, tmp_path, extra_path=str(fake))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "torch: installed but does not import: RuntimeError: this torch is broken" in run.stdout, run.stdout


def test_an_unknown_argument_is_refused(package_path, tmp_path):
    run = doctor(package_path, tmp_path, "--bogus")
    assert run.returncode == 2 and 'volt8 doctor: unknown argument "--bogus"' in run.stderr, run.stdout + run.stderr
