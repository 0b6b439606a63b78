"""make test-vllm: the vLLM plugin against the pinned vLLM, in the venv scripts/vllm_tests.sh makes (vLLM
and the volt8 wheel of this tree installed there). CPU only: vLLM imports without a GPU."""
import json
import os
import subprocess
import sys
import tempfile

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE_SCRIPT = os.path.join(REPO_ROOT, "tests", "fixtures", "make_checkpoints.py")


@pytest.fixture(scope="session")
def checkpoints():
    """The fixture checkpoints (native and online groups): (folder, manifest)."""
    with tempfile.TemporaryDirectory(prefix="volt8-vllm-fixtures-") as scratch:
        folder = os.path.join(scratch, "checkpoints")
        run = subprocess.run([sys.executable, FIXTURE_SCRIPT, folder, "--seed", "11", "--group", "native", "--group",
                              "online"], capture_output=True, text=True)
        assert run.returncode == 0, f"make_checkpoints.py failed:\n{run.stdout}\n{run.stderr}"
        with open(os.path.join(folder, "manifest.json")) as stream:
            yield folder, json.load(stream)
