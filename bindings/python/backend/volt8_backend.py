"""The PEP 517 backend of volt8: scikit-build-core, whose wheel is then repaired by auditwheel.

scikit-build-core tags a wheel `linux_x86_64`, which package indexes refuse and which says nothing of
the glibc it needs. auditwheel finds the oldest manylinux policy that the library and the volt8
command fit, copies in the shared libraries outside that policy (Lua, cJSON) with run paths that
point at them, and tags the wheel with the policy. The driver and NVRTC are opened at run time with
dlopen, so no CUDA library is copied in.
"""
import os
import shutil
import subprocess
import sys
import tempfile

from scikit_build_core.build import *  # noqa: F401,F403 - the hooks this backend does not change
from scikit_build_core.build import build_wheel as _build_linux_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with tempfile.TemporaryDirectory(prefix="volt8-wheel-") as scratch:
        name = _build_linux_wheel(scratch, config_settings, metadata_directory)
        repaired = os.path.join(scratch, "repaired")
        command = [sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", repaired,
                   os.path.join(scratch, name)]
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise RuntimeError("volt8: auditwheel could not make a manylinux wheel of %s:\n%s" % (name, result.stdout))
        wheels = [entry for entry in os.listdir(repaired) if entry.endswith(".whl")]
        if len(wheels) != 1:
            raise RuntimeError("volt8: auditwheel left %d wheels in %s: %s" % (len(wheels), repaired, wheels))
        os.makedirs(wheel_directory, exist_ok=True)
        shutil.move(os.path.join(repaired, wheels[0]), os.path.join(wheel_directory, wheels[0]))
        return wheels[0]
