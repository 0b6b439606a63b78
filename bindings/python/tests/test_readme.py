"""The README's Python example, run as written on a synthetic checkpoint (GPU and torch; skipped
without them unless VOLT8_REQUIRE_GPU=1)."""
import importlib.util
import os
import re

import pytest

from conftest import REPO_ROOT
from test_gpu import torch  # noqa: F401 - the fixture

pytestmark = pytest.mark.gpu


def readme_python_example():
    with open(os.path.join(REPO_ROOT, "README.md")) as stream:
        text = stream.read()
    section = text[text.index("From Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_is_found():
    code = readme_python_example()
    for step in ("volt8.Experts.load", "prepare", "forward", "CUDAGraph", "volt8.torch.MoEExperts", "torch.compile"):
        assert step in code, step


def test_the_readme_example_runs(torch, tmp_path):  # noqa: F811 - the fixture
    spec = importlib.util.spec_from_file_location("mtp_step", os.path.join(REPO_ROOT, "examples", "mtp_step.py"))
    mtp_step = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mtp_step)
    checkpoint = mtp_step.write_synthetic_checkpoint(str(tmp_path / "ckpt"), num_experts=16, top_k=8)
    code = readme_python_example().replace('"/models/ckpt"', repr(checkpoint))
    exec(compile(code, "README.md (From Python)", "exec"), {})
