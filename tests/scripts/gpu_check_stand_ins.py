"""What the tests of scripts/gpu_check.sh's phases share: a folder whose nvidia-smi names a fake
GPU, put first on PATH, so that a phase runs here with stand-ins for the GPU machine's programs."""
import os


def fake_gpu_env(tmp_path, **extra):
    """os.environ with a fake nvidia-smi first on PATH, and `extra` on top."""
    fake_bin = tmp_path / "fake_bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'Fake GPU, 1.0, 1 MiB, 1 MHz'\n")
    smi.chmod(0o755)
    return dict(os.environ, PATH=f"{fake_bin}:{os.environ['PATH']}", **extra)
