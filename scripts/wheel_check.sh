#!/usr/bin/env bash
# The wheel as an engine gets it: `pip wheel .`, then, in a fresh venv outside the source tree,
# `pip install` of that wheel and checks that use nothing of the tree's package or build:
#   - the wheel is tagged manylinux for glibc 2.28 or older, and no ELF file in it needs a glibc symbol
#     version newer than 2.28 or a library outside glibc (cJSON is linked in);
#   - no installed file names the source or build folder;
#   - `import volt8`, library_path/library_version, volt8.plan, with no VOLT8_* variable set;
#   - `volt8 compile --arch sm_70` through the wheel's NVRTC 12;
#   - the binding's CPU tests against the installed package (VOLT8_TEST_INSTALLED=1).
# WHEEL_CHECK_KEEP=1 keeps the scratch folder (its path is printed).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python3}"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/volt8-wheel-check.XXXXXX")"
[ "${WHEEL_CHECK_KEEP:-0}" = 1 ] && echo "wheel_check: scratch folder $scratch" || trap 'rm -rf "$scratch"' EXIT

# Nothing of the caller's volt8 set-up may help the installed package.
for variable in $(env | sed -n 's/^\(VOLT8_[A-Z0-9_]*\)=.*/\1/p'); do unset "$variable"; done
unset CUDA_HOME CUDA_PATH LD_LIBRARY_PATH PYTHONPATH

echo "wheel_check: pip wheel (build folder build/wheel)"
started=$SECONDS
"$python" -m pip wheel --no-deps --disable-pip-version-check -q "$root" -w "$scratch/dist"
wheel="$(ls "$scratch"/dist/volt8-*.whl)"
echo "wheel_check: built $(basename "$wheel") in $((SECONDS - started)) s"

"$python" -m venv "$scratch/venv"
venv_python="$scratch/venv/bin/python3"
"$venv_python" -m pip install -q --disable-pip-version-check "$wheel" pytest safetensors ml_dtypes auditwheel
site="$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

cd "$scratch"
"$venv_python" "$root/scripts/wheel_inspect.py" --wheel "$wheel" --site "$site" --forbid "$root" \
  --forbid "$root/build/wheel"

echo "wheel_check: import, plan and compile from the installed wheel"
checkpoint="$scratch/demo-checkpoint"
"$scratch/venv/bin/volt8" demo --keep "$checkpoint" >"$scratch/demo.log" 2>&1 ||
  { cat "$scratch/demo.log"; exit 1; }
grep -qF "the checkpoint is kept in $checkpoint" "$scratch/demo.log" ||
  { cat "$scratch/demo.log"; echo "wheel_check: volt8 demo --keep did not say where the checkpoint is" >&2; exit 1; }
"$venv_python" - "$checkpoint" "$root" <<'PY'
import os, sys
import volt8
checkpoint, root = sys.argv[1], sys.argv[2]
print("wheel_check:", volt8.library_path(), volt8.library_version())
for path in (volt8.__file__, volt8.library_path()):
    assert not os.path.realpath(path).startswith(os.path.realpath(root) + os.sep), f"{path} is in the source tree"
report = volt8.plan(checkpoint, tp_size=4)
assert len(report.ranks) == 4, report
print("wheel_check: volt8.plan gave", len(report.ranks), "ranks")
PY
"$scratch/venv/bin/volt8" compile --arch sm_70 --cache "$scratch/cache"
entries="$(find "$scratch/cache" -type f | wc -l)"
[ "$entries" -gt 0 ] || { echo "wheel_check: volt8 compile --arch sm_70 cached nothing" >&2; exit 1; }
echo "wheel_check: $entries cache entries for sm_70"

echo "wheel_check: the binding's CPU tests against the installed wheel"
VOLT8_TEST_INSTALLED=1 "$venv_python" -m pytest -q -p no:cacheprovider -c "$root/pyproject.toml" \
  --rootdir "$root" "$root/bindings/python/tests"
