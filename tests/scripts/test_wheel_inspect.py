"""scripts/wheel_inspect.py: the manylinux tag and the glibc symbol versions an ELF file needs, checked
against glibc 2.28 on libraries built here."""
import importlib.util
import os
import shutil
import subprocess

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "wheel_inspect.py")


def inspector():
    pytest.importorskip("elftools", reason="pyelftools is missing (scripts/bootstrap.sh installs it into .venv)")
    spec = importlib.util.spec_from_file_location("wheel_inspect", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_library(tmp_path, name, body):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        pytest.skip("no C compiler")
    source = tmp_path / f"{name}.c"
    source.write_text(body)
    path = tmp_path / f"lib{name}.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(path), str(source), "-lpthread", "-ldl"], check=True)
    return str(path)


def test_tags_name_their_glibc():
    module = inspector()
    assert module.tag_glibc("manylinux_2_28_x86_64") == (2, 28)
    assert module.tag_glibc("manylinux_2_34_x86_64") == (2, 34)
    assert module.tag_glibc("manylinux2014_x86_64") == (2, 17)
    assert module.tag_glibc("linux_x86_64") is None


def test_a_library_binding_a_newer_glibc_symbol_is_refused(tmp_path):
    module = inspector()
    old = shared_library(tmp_path, "old", "#include <string.h>\nsize_t f(const char *s) { return strlen(s); }\n")
    failures = []
    assert module.check_glibc(old, failures) <= (2, 28) and failures == []
    # glibc 2.34 moved pthread_create and dlopen into libc under a new version, which a build on a
    # newer glibc binds
    new = shared_library(tmp_path, "new", """#include <dlfcn.h>
#include <pthread.h>
static void *run(void *arg) { return arg; }
int f(void) { pthread_t t; void *h = dlopen("x", RTLD_NOW); return pthread_create(&t, 0, run, h); }
""")
    versions = module.glibc_versions(new)
    if max(versions) <= (2, 28):
        pytest.skip(f"this glibc binds pthread_create at GLIBC_{max(versions)[0]}.{max(versions)[1]}")
    assert module.check_glibc(new, failures) == max(versions)
    assert len(failures) == 1 and "newer than 2.28: " in failures[0] and "GLIBC_2.34" in failures[0], failures
