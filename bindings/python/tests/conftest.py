"""Shared set-up: the package on sys.path, the library under test, and the checkpoint fixtures."""
import json
import os
import subprocess
import sys
import tempfile

import pytest

BINDING_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(os.path.dirname(BINDING_DIR))
FIXTURE_SCRIPT = os.path.join(REPO_ROOT, "tests", "fixtures", "make_checkpoints.py")
# VOLT8_TEST_INSTALLED=1: test the volt8 package installed in this Python (the wheel, with the library
# inside it), not the source tree's package and build (scripts/wheel_check.sh).
TEST_INSTALLED = os.environ.get("VOLT8_TEST_INSTALLED") == "1"
if not TEST_INSTALLED:
    sys.path.insert(0, BINDING_DIR)
    # Without VOLT8_LIBRARY, test the repo's own build when there is one (`make test` sets it explicitly).
    _repo_build = os.path.join(REPO_ROOT, "build", "libvolt8.so.0")
    if not os.environ.get("VOLT8_LIBRARY") and os.path.exists(_repo_build):
        os.environ["VOLT8_LIBRARY"] = _repo_build


@pytest.fixture(scope="session")
def checkpoints():
    """The fixture checkpoints of tests/fixtures/make_checkpoints.py: (folder, manifest)."""
    if not os.path.exists(FIXTURE_SCRIPT):
        pytest.skip(f"no fixture generator at {FIXTURE_SCRIPT}")
    missing = [name for name in ("safetensors", "ml_dtypes") if not _importable(name)]
    if missing:
        pytest.skip(f"the fixture generator needs {', '.join(missing)}")
    with tempfile.TemporaryDirectory(prefix="volt8-py-fixtures-") as scratch:
        folder = os.path.join(scratch, "checkpoints")
        run = subprocess.run([sys.executable, FIXTURE_SCRIPT, folder, "--seed", "7"], capture_output=True, text=True)
        assert run.returncode == 0, f"make_checkpoints.py failed:\n{run.stdout}\n{run.stderr}"
        with open(os.path.join(folder, "manifest.json")) as stream:
            yield folder, json.load(stream)


def _importable(name):
    try:
        __import__(name)
    except ImportError:
        return False
    return True
