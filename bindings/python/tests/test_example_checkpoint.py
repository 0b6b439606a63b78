"""examples/mtp_step.py's synthetic checkpoint is one volt8 reads (no torch needed for this part)."""
import importlib.util
import os

import numpy as np

import volt8
from conftest import REPO_ROOT


def load_example():
    spec = importlib.util.spec_from_file_location("mtp_step", os.path.join(REPO_ROOT, "examples", "mtp_step.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_synthetic_checkpoint_plans_and_loads(tmp_path):
    example = load_example()
    folder = example.write_synthetic_checkpoint(str(tmp_path / "ckpt"), hidden=256, intermediate=640, num_experts=3)
    report = volt8.plan(folder, 4)
    assert (report.route, report.hidden, report.intermediate, report.num_experts) == ("native", 256, 640, 3)
    assert report.quant_format.startswith("modelopt") and report.scale_dtype == "BF16"
    assert report.tensor_prefix == "mtp.layers.0.mlp.experts."
    host = volt8.load_host_checkpoint(folder, tp_size=4, tp_rank=1)
    assert host.shape == volt8.MoeShape(hidden=256, intermediate=160, num_experts=3, intermediate_offset=32)
    scales = host.s13.view(np.float16).astype(np.float64) / 256.0
    assert ((scales >= 4.9e-5) & (scales <= 2.01e-4)).all()
    assert not np.isin(host.w13, (0x7F, 0xFF)).any()
