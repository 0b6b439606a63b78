"""Finding the library, version checks, and the ctypes structs against the C header."""
import ctypes
import ctypes.util
import json
import os
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


def test_found_next_to_the_package(tmp_path):
    package = tmp_path / "site" / "volt8"
    shutil.copytree(os.path.join(BINDING_DIR, "volt8"), package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(library_file(), package / "libvolt8.so.0")
    code, out, err = probe({}, tmp_path, package_root=str(tmp_path / "site"))
    assert code == 0, err
    assert json.loads(out)[0] == str(package / "libvolt8.so.0")


def test_found_through_the_system_loader(tmp_path):
    folder = tmp_path / "lib"
    folder.mkdir()
    shutil.copy(library_file(), folder / "libvolt8.so.0")
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
           "volt8_plan_report": _abi.PlanReport, "volt8_rejection_args": _abi.RejectionArgs}


def test_structs_match_the_header(tmp_path):
    """sizeof and every offsetof of the ctypes mirrors against the C compiler's view of volt8.h."""
    header_dir = os.path.join(REPO_ROOT, "include")
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not os.path.exists(os.path.join(header_dir, "volt8.h")) or not compiler:
        pytest.skip("needs include/volt8.h and a C compiler")
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include \"volt8.h\"", "int main(void) {"]
    for c_name, struct in STRUCTS.items():
        lines.append(f'  printf("{c_name} sizeof %zu\\n", sizeof({c_name}));')
        for field, _ in struct._fields_:
            lines.append(f'  printf("{c_name} {field} %zu\\n", offsetof({c_name}, {field}));')
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


def test_init_macros_defaults():
    options = _abi.LoadOptions()
    assert (options.size, options.tp_size, options.max_tokens, options.max_top_k, options.online_block_n) == (
        ctypes.sizeof(_abi.LoadOptions), 1, 64, 10, 128)
    assert volt8.MoeShape().to_c().intermediate_offset == 32
    assert _abi.RejectionArgs().size == ctypes.sizeof(_abi.RejectionArgs)


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
