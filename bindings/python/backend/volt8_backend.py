"""The PEP 517 backend of volt8: scikit-build-core, compiling with `zig cc` for glibc 2.28, whose wheel
is then repaired by auditwheel.

The wheel must install where glibc is as old as 2.28 (RHEL 8, Ubuntu 20.04), so its ELF files may
bind no glibc symbol version newer than that. A compiler links against the glibc it runs on; `zig cc
-target x86_64-linux-gnu.2.28` (the `ziglang` package) links against 2.28's instead. cJSON is linked in
statically, built the same way from Debian's source package by scripts/wheel_deps.sh
(docs/design.md, "The wheel"), so the wheel carries no shared library besides libvolt8.

scikit-build-core tags a wheel `linux_x86_64`, which package indexes refuse and which says nothing of
the glibc it needs. auditwheel finds the oldest manylinux policy that the library and the volt8
command fit and tags the wheel with it. The driver and NVRTC are opened at run time with dlopen, so
no CUDA library is copied in.
"""
import os
import shutil
import subprocess
import sys
import tempfile

from scikit_build_core.build import *  # noqa: F401,F403 - the hooks this backend does not change
from scikit_build_core.build import build_wheel as _build_linux_wheel


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# Kept between builds: scripts/wheel_deps.sh redoes it only when zig or the sources change.
DEPENDENCIES = os.path.join(ROOT, "build", "wheel-deps")


def _glibc_2_28_settings(config_settings):
    """config_settings with the zig compiler and the static cJSON (the caller's own defines win)."""
    import ziglang  # build-system.requires installs it
    zig = os.path.join(os.path.dirname(os.path.abspath(ziglang.__file__)), "zig")
    script = os.path.join(ROOT, "scripts", "wheel_deps.sh")
    result = subprocess.run(["bash", script, zig, DEPENDENCIES], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    if result.returncode != 0:
        raise RuntimeError("volt8: scripts/wheel_deps.sh could not build cJSON for glibc 2.28:\n" + result.stdout)
    settings = dict(config_settings or {})
    settings.setdefault("cmake.define.CMAKE_C_COMPILER", os.path.join(DEPENDENCIES, "zig-cc"))
    settings.setdefault("cmake.define.VOLT8_STATIC_DEPS", DEPENDENCIES)
    # zig's own glibc 2.28 objects (stat and the like) carry debug information naming the folder they
    # were built from: none of it goes into the wheel.
    for kind in ("SHARED", "EXE"):
        settings.setdefault(f"cmake.define.CMAKE_{kind}_LINKER_FLAGS", "-Wl,--strip-debug")
    return settings


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    config_settings = _glibc_2_28_settings(config_settings)
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
