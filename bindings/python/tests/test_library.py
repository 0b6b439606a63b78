"""Finding the library, version checks, and the ctypes structs against the C header."""
import ctypes
import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import volt8
from volt8 import _abi, _library
from conftest import BINDING_DIR, REPO_ROOT

PROBE = "import volt8, json; print(json.dumps([volt8.library_path(), volt8.library_version()]))"


def library_file():
    volt8.library_version()
    return volt8.library_path()


def probe(env_changes, cwd, package_root=BINDING_DIR, library_dir=None):
    """Imports volt8 from `package_root` in a fresh interpreter; returns (returncode, stdout, stderr).
    library_dir goes first on LD_LIBRARY_PATH, whose other entries stay (they may hold libvolt8's own
    dependencies)."""
    env = {key: value for key, value in os.environ.items() if key != "VOLT8_LIBRARY"}
    env.update(env_changes)
    if library_dir:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [library_dir, env.get("LD_LIBRARY_PATH")]))
    env["PYTHONPATH"] = package_root
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=cwd)
    return run.returncode, run.stdout.strip(), run.stderr


def test_library_loads_and_reports_its_version():
    assert os.path.exists(library_file())
    number = _library.load().volt8_version_number()
    assert volt8.library_version() == "%d.%d.%d" % _library.split_version(number)
    assert _library.split_version(number)[:2] >= _library.REQUIRED_VERSION
    assert volt8.__version__.split(".")[0] == volt8.library_version().split(".")[0]


def test_found_through_environment_variable_file_or_folder(tmp_path):
    source = library_file()
    code, out, err = probe({"VOLT8_LIBRARY": source}, tmp_path)
    assert code == 0, err
    assert json.loads(out)[0] == os.path.abspath(source)
    code, out, err = probe({"VOLT8_LIBRARY": os.path.dirname(source)}, tmp_path)
    assert code == 0, err
    assert os.path.dirname(json.loads(out)[0]) == os.path.dirname(os.path.abspath(source))


def copy_library(folder):
    """Copies the library under test into `folder`, with the libraries a wheel bundles beside its
    package (volt8.libs, which its run path $ORIGIN/../volt8.libs names) where there are any."""
    source = library_file()
    shutil.copy(source, folder / "libvolt8.so.0")
    bundled = os.path.join(os.path.dirname(os.path.dirname(source)), "volt8.libs")
    if os.path.isdir(bundled):
        shutil.copytree(bundled, folder.parent / "volt8.libs", dirs_exist_ok=True)


def test_found_next_to_the_package(tmp_path):
    package = tmp_path / "site" / "volt8"
    shutil.copytree(os.path.join(BINDING_DIR, "volt8"), package, ignore=shutil.ignore_patterns("__pycache__"))
    copy_library(package)
    code, out, err = probe({}, tmp_path, package_root=str(tmp_path / "site"))
    assert code == 0, err
    assert json.loads(out)[0] == str(package / "libvolt8.so.0")


def test_found_through_the_system_loader(tmp_path):
    folder = tmp_path / "lib"
    folder.mkdir()
    copy_library(folder)
    code, out, err = probe({}, tmp_path, library_dir=str(folder))
    assert code == 0, err
    assert json.loads(out)[0] == str(folder / "libvolt8.so.0")


def test_missing_library_names_what_was_tried(tmp_path):
    code, out, err = probe({"VOLT8_LIBRARY": str(tmp_path / "nowhere" / "libvolt8.so.0")}, tmp_path)
    assert code == 1
    assert "LibraryError" in err and "VOLT8_LIBRARY" in err and "nowhere" in err


def test_a_library_that_is_not_volt8_is_refused(tmp_path):
    other = ctypes.util.find_library("m") or "libm.so.6"
    code, out, err = probe({"VOLT8_LIBRARY": other}, tmp_path)
    assert code == 1
    assert "lacks a volt8 function" in err


def test_version_check():
    _library.check_version(100, required=(0, 1))
    _library.check_version(201, required=(0, 1))
    with pytest.raises(volt8.LibraryError, match="0.0.9 does not fit"):
        _library.check_version(9, required=(0, 1))
    with pytest.raises(volt8.LibraryError, match="1.1.0 does not fit"):
        _library.check_version(10100, required=(0, 1))
    with pytest.raises(volt8.LibraryError, match="1.0.0 does not fit"):
        _library.check_version(10000, required=(2, 0))


def test_status_names_come_from_the_library():
    assert volt8.status_string(volt8.Status.ERR_SCALE_RANGE).startswith("VOLT8_ERR_SCALE_RANGE")
    for status in volt8.Status:
        assert volt8.status_string(status).startswith("VOLT8_" + status.name)
    assert volt8.status_string(999) == "unknown status"


STRUCTS = {"volt8_ctx_options": _abi.CtxOptions, "volt8_moe_shape": _abi.MoeShape,
           "volt8_host_experts": _abi.HostExperts, "volt8_moe_args": _abi.MoeArgs,
           "volt8_load_report": _abi.LoadReport, "volt8_load_options": _abi.LoadOptions,
           "volt8_host_checkpoint": _abi.HostCheckpoint, "volt8_memory_report": _abi.MemoryReport,
           "volt8_plan_report": _abi.PlanReport, "volt8_rejection_args": _abi.RejectionArgs,
           "volt8_moe_layout": _abi.MoeLayout, "volt8_forward_info": _abi.ForwardInfo}


def test_structs_match_the_header(tmp_path):
    """sizeof and every offsetof of the ctypes mirrors against the C compiler's view of volt8.h, and the
    default shape (VOLT8_MOE_SHAPE_INIT) against the binding's."""
    header_dir = os.path.join(REPO_ROOT, "include")
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not os.path.exists(os.path.join(header_dir, "volt8.h")) or not compiler:
        pytest.skip("needs include/volt8.h and a C compiler")
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#define VOLT8_EXPERIMENTAL_API 1", "#include \"volt8.h\"",
             "int main(void) {", "  volt8_moe_shape shape = VOLT8_MOE_SHAPE_INIT;"]
    for c_name, struct in STRUCTS.items():
        lines.append(f'  printf("{c_name} sizeof %zu\\n", sizeof({c_name}));')
        for field, _ in struct._fields_:
            lines.append(f'  printf("{c_name} {field} %zu\\n", offsetof({c_name}, {field}));')
    for field in _abi.DEFAULT_SHAPE:
        lines.append(f'  printf("default {field} %d\\n", (int)shape.{field});')
    lines.append("  return 0;\n}")
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines))
    binary = tmp_path / "layout"
    build = subprocess.run([compiler, "-I", header_dir, str(source), "-o", str(binary)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    seen = {}
    for line in subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.splitlines():
        c_name, field, value = line.split()
        seen[c_name, field] = int(value)
    for c_name, struct in STRUCTS.items():
        assert seen[c_name, "sizeof"] == ctypes.sizeof(struct), c_name
        for field, _ in struct._fields_:
            assert seen[c_name, field] == getattr(struct, field).offset, f"{c_name}.{field}"
    assert {field: seen["default", field] for field in _abi.DEFAULT_SHAPE} == _abi.DEFAULT_SHAPE
    assert {name: getattr(volt8.MoeShape(), name) for name in _abi.DEFAULT_SHAPE} == _abi.DEFAULT_SHAPE
    assert {name: getattr(_abi.MoeShape(), name) for name in _abi.DEFAULT_SHAPE} == _abi.DEFAULT_SHAPE


def test_init_macros_defaults():
    options = _abi.LoadOptions()
    assert (options.size, options.tp_size, options.max_tokens, options.max_top_k, options.online_block_n) == (
        ctypes.sizeof(_abi.LoadOptions), 1, 64, 16, 128)
    assert volt8.MoeShape().to_c().intermediate_offset == 32
    assert _abi.RejectionArgs().size == ctypes.sizeof(_abi.RejectionArgs)


def test_the_package_under_test_is_the_installed_one_when_asked():
    from conftest import TEST_INSTALLED
    if not TEST_INSTALLED:
        pytest.skip("VOLT8_TEST_INSTALLED is not 1: the source tree's package is under test")
    root = os.path.realpath(REPO_ROOT) + os.sep
    assert not os.path.realpath(volt8.__file__).startswith(root), volt8.__file__
    package = os.path.dirname(os.path.realpath(volt8.__file__))
    assert os.path.dirname(os.path.realpath(volt8.library_path())) == package, volt8.library_path()


def test_the_pip_installed_nvrtc_folder_is_found():
    from volt8 import _nvrtc
    try:
        import nvidia.cuda_nvrtc  # noqa: F401
    except ImportError:
        pytest.skip("nvidia-cuda-nvrtc-cu12 is not installed in this Python")
    folders = _nvrtc.wheel_folders()
    assert any(os.path.exists(os.path.join(folder, "libnvrtc.so.12")) for folder in folders), folders
    assert _nvrtc.wheel_folders() == folders, "the folders are looked up once and kept"
    joined, listed = volt8.context.nvrtc_folders(None)
    assert joined is None and [os.fsdecode(folder) for folder in listed] == folders, "each folder goes whole"


COMPILE_70 = """
import volt8
ctx = volt8.Context(device=None, target_arch="sm_70", cache_disable=True)
name = next(name for name in ctx.variant_names() if name.startswith("gate_up.cc.bm1"))
print(name, ctx.compile_variant(name))
"""


def test_a_context_compiles_for_compute_70_with_no_variable_set(tmp_path):
    try:
        import nvidia.cuda_nvrtc  # noqa: F401
    except ImportError:
        pytest.skip("nvidia-cuda-nvrtc-cu12 is not installed in this Python")
    env = {key: value for key, value in os.environ.items()
           if key not in ("VOLT8_NVRTC_DIRS", "VOLT8_NVRTC", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH")}
    env["VOLT8_LIBRARY"] = library_file()
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.realpath(volt8.__file__)))
    run = subprocess.run([sys.executable, "-c", COMPILE_70], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("False"), run.stdout


def test_an_empty_nvrtc_folder_list_leaves_the_wheel_out(tmp_path):
    env = {key: value for key, value in os.environ.items()
           if key not in ("VOLT8_NVRTC_DIRS", "VOLT8_NVRTC", "CUDA_HOME", "CUDA_PATH")}
    env["VOLT8_LIBRARY"] = library_file()
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.realpath(volt8.__file__)))
    code = COMPILE_70.replace("cache_disable=True)", "cache_disable=True, nvrtc_dirs=[])")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    if run.returncode == 0:
        pytest.skip("this host's system loader or toolkit has an NVRTC for compute_70")
    assert "ArchUnsupportedError" in run.stderr and "options.nvrtc_dirs: none given" in run.stderr, run.stderr


def test_the_console_script_hands_the_wheel_nvrtc_to_the_command():
    from volt8 import _cli, _nvrtc
    folders = _nvrtc.wheel_folders()
    if not folders:
        pytest.skip("no pip-installed NVRTC in this Python")
    environment = _cli.command_environment({"VOLT8_NVRTC_DIRS": "/first"})
    assert environment["VOLT8_NVRTC_DIRS"].split(":") == ["/first"] + folders
    assert _cli.command_path().endswith(os.path.join("volt8", "bin", "volt8"))


def test_kernels_the_cache_did_not_keep_are_reported(tmp_path):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("x")
    with volt8.Context(device=None, cache_dir=not_a_folder, target_arch="sm_70") as ctx:
        assert ctx.cache_store_failures() == (0, "")
        try:
            ctx.compile_variant(ctx.variant_names()[0])
        except volt8.ArchUnsupportedError as error:
            pytest.skip(f"no NVRTC for sm_70 here: {error}")
        count, reason = ctx.cache_store_failures()
        assert count >= 1 and str(not_a_folder) in reason and "Not a directory" in reason, (count, reason)
    with volt8.Context(device=None, cache_disable=True) as ctx:
        assert ctx.cache_store_failures() == (0, "the disk cache is disabled (cache_disable)")


def test_a_fifo_named_by_volt8_library_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "libvolt8.so.0"
    os.mkfifo(fifo)
    env = {key: value for key, value in os.environ.items() if key != "VOLT8_LIBRARY"}
    env.update(VOLT8_LIBRARY=str(fifo), PYTHONPATH=os.path.dirname(os.path.dirname(os.path.realpath(volt8.__file__))))
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=60)
    assert run.returncode == 1 and "not a regular file" in run.stderr, run.stderr


def test_a_truncated_library_is_refused_with_the_reason(tmp_path):
    cut = tmp_path / "libvolt8.so.0"
    with open(library_file(), "rb") as whole:
        cut.write_bytes(whole.read(10240))
    code, out, err = probe({"VOLT8_LIBRARY": str(cut)}, tmp_path)
    # which LOAD segment is the first past 10240 bytes depends on the linker's layout (the wheel's differs)
    assert code == 1 and re.search(re.escape(f"{cut} is truncated: segment ") + r"\d+ \(LOAD\) ends at byte \d+, past its "
                                   r"10240 bytes", err), (code, err)
