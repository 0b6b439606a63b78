"""`volt8 doctor` from Python (`python -m volt8 doctor`, or the wheel's `volt8` console script).

The packaged volt8 command prints what the C library finds (library, driver and GPUs, NVRTC, kernel
cache, tuning tables); this adds what only Python sees, in place of the command's line that leaves
torch to it (before the command's verdict): the libvolt8 this Python loads and the NVRTC folder the
binding hands it, torch, and whether volt8.torch registers its operators. The exit
status is the command's (1 when a GPU present cannot be served), else 1 when the library does not
load or torch is installed but volt8.torch does not register its operators, else 0.
"""
import os
import subprocess
import sys

from . import _cli

# The operators volt8.torch registers under torch.ops.volt8.
TORCH_OPERATORS = ("moe_forward", "rejection_sample")


def library_lines():
    """(lines, ok) about the libvolt8 this Python loads."""
    import volt8
    from . import _nvrtc
    try:
        lines = [f"python: libvolt8 {volt8.library_version()} at {volt8.library_path()}"]
    except volt8.LibraryError as error:
        return [f"python: libvolt8 does not load: {error}"], False
    folders = _nvrtc.wheel_folders()
    lines.append("python: the binding's nvrtc_dirs: " +
                 (" ".join(folders) if folders else "none (no nvidia-cuda-nvrtc-cu12 installed)"))
    return lines, True


def torch_lines():
    """(lines, ok) about torch and volt8.torch; torch missing is fine (it is optional)."""
    try:
        import torch
    except ImportError:
        return ["torch: not installed (optional; pip install volt8[torch] for volt8.torch)"], True
    except Exception as error:  # noqa: BLE001 - a broken torch install is what this reports
        return [f"torch: installed but does not import: {type(error).__name__}: {error}"], False
    lines = [f"torch: {torch.__version__} (CUDA {torch.version.cuda}), GPU available: {torch.cuda.is_available()}"]
    try:
        import volt8.torch  # noqa: F401 - importing registers the operators
    except Exception as error:  # noqa: BLE001 - any failure means the operators are not there
        return lines + [f"volt8.torch: does not import: {type(error).__name__}: {error}"], False
    missing = [name for name in TORCH_OPERATORS if not hasattr(torch.ops.volt8, name)]
    if missing:
        return lines + ["volt8.torch: imported, but torch.ops.volt8 lacks " + ", ".join(missing)], False
    return lines + ["volt8.torch: registers " + ", ".join("torch.ops.volt8." + name for name in TORCH_OPERATORS)], True


# The command's line that says it leaves torch to this side: the Python lines stand in its place.
COMMAND_TORCH_NOTE = "torch: not checked by this command"


def main(arguments):
    if arguments:
        sys.stderr.write(f"volt8 doctor: unknown argument \"{arguments[0]}\"\nusage: volt8 doctor\n")
        return 2
    path = _cli.command_path()
    library, library_ok = library_lines()
    torch_report, torch_ok = torch_lines()
    python_lines = library + torch_report
    if os.access(path, os.X_OK):
        sys.stdout.flush()
        run = subprocess.run([path, "doctor"], env=_cli.command_environment(), stdout=subprocess.PIPE, text=True,
                             errors="replace")
        command_status = run.returncode
        lines = run.stdout.splitlines()
        # the Python side where the command says it does not check torch, so no line contradicts the next
        at = next((i for i, line in enumerate(lines) if line.startswith(COMMAND_TORCH_NOTE)), len(lines))
        lines[at:at + 1] = python_lines
        for line in lines:
            print(line)
    else:
        print(f"volt8 doctor: the packaged command {path} is missing; reinstall the volt8 wheel")
        command_status = 1
        for line in python_lines:
            print(line)
    if command_status != 0:
        return command_status
    return 0 if library_ok and torch_ok else 1
