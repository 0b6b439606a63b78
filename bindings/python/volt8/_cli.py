"""The `volt8` console script of the wheel: runs the volt8 command shipped inside the package.

The command finds NVRTC as the library does; this launcher adds the folder of the pip-installed NVRTC
(nvidia-cuda-nvrtc-cu12) to VOLT8_NVRTC_DIRS, after any folders the caller listed there. `volt8
doctor` runs the command's doctor, then adds the Python side (volt8._doctor).
"""
import os
import sys

from . import _nvrtc


def command_path():
    """The packaged volt8 executable."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "volt8")


def command_environment(environment=None):
    """A copy of `environment` (default os.environ) with the wheel's NVRTC folder appended to VOLT8_NVRTC_DIRS."""
    environment = dict(os.environ if environment is None else environment)
    folders = [folder for folder in environment.get("VOLT8_NVRTC_DIRS", "").split(":") if folder]
    for folder in _nvrtc.wheel_folders():
        if folder not in folders:
            folders.append(folder)
    if folders:
        environment["VOLT8_NVRTC_DIRS"] = ":".join(folders)
    return environment


def main():
    if sys.argv[1:2] == ["doctor"]:
        from . import _doctor  # the command's report, then the Python side (torch, volt8.torch)
        return _doctor.main(sys.argv[2:])
    path = command_path()
    if not os.access(path, os.X_OK):
        sys.stderr.write("volt8: the packaged command %s is missing; reinstall the volt8 wheel\n" % path)
        return 1
    os.execve(path, [path] + sys.argv[1:], command_environment())
    return 1  # not reached: execve replaces the process or raises


if __name__ == "__main__":
    sys.exit(main())
