#!/usr/bin/env bash
# make test-1cat SRC=DIR: the vLLM plugin's tests (tests/onecat) inside 1Cat-vLLM, on the CPU.
#   - a venv (.venv-1cat, ignored by git, or the one ONECAT_VENV names) with the torch the fork pins
#     (its requirements/cuda.txt: 2.10.0, from PyPI), the fork's build requirements (its pyproject.toml)
#     and the fork itself, installed from the checkout DIR with VLLM_TARGET_DEVICE=empty (no kernels are
#     compiled; its optional Rust front end is not built) and its Python requirements; made once, and
#     again when DIR's commit changes;
#   - the volt8 wheel of this tree built (`pip wheel .`) and installed into it with its dependencies, so
#     a test can see that it brings no upstream vLLM over the fork;
#   - pytest tests/onecat from a scratch folder, against the installed packages.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python3}"
src="${SRC:-}"
if [ -z "$src" ] || [ ! -f "$src/setup.py" ] || [ ! -d "$src/vllm" ]; then
  echo "onecat_tests: SRC='$src' is not a 1Cat-vLLM checkout (a folder with setup.py and vllm/): make test-1cat SRC=DIR" >&2
  exit 2
fi
src="$(cd "$src" && pwd)"
venv="${ONECAT_VENV:-$root/.venv-1cat}"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/volt8-1cat-tests.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

torch_pin="$(sed -n 's/^torch *== *\([0-9.]*\).*/\1/p' "$src/requirements/cuda.txt" | head -n 1)"
if [ -z "$torch_pin" ]; then
  echo "onecat_tests: $src/requirements/cuda.txt pins no torch (a line torch==X)" >&2
  exit 2
fi
commit="$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unversioned)"
stamp="$venv/.volt8-1cat-source"
if [ ! -x "$venv/bin/python3" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$src $commit torch $torch_pin" ]; then
  echo "onecat_tests: installing torch==$torch_pin and 1Cat-vLLM from $src ($commit) into $venv (once; several GB)"
  [ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
  pip=("$venv/bin/python3" -m pip install -q --disable-pip-version-check)
  "${pip[@]}" "torch==$torch_pin"
  # the fork's build requirements, torch aside (it is in already, at the pin)
  build_requirements="$("$venv/bin/python3" - "$src/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as stream:
    requires = tomllib.load(stream)["build-system"]["requires"]
print("\n".join(line for line in requires if not line.replace(" ", "").startswith("torch")))
PY
)"
  mapfile -t build_list <<<"$build_requirements"
  "${pip[@]}" "${build_list[@]}"
  version=()
  [ -d "$src/.git" ] || version=(env SETUPTOOLS_SCM_PRETEND_VERSION=0.0.0)
  # No kernels (VLLM_TARGET_DEVICE=empty), and no cargo on PATH: the Rust front end is optional and would
  # want crates from the network.
  no_cargo_path="$(printf '%s' "$PATH" | tr ':' '\n' | grep -v cargo | paste -sd: -)"
  "${version[@]}" env VLLM_TARGET_DEVICE=empty PATH="$no_cargo_path" \
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check --no-build-isolation "$src"
  echo "$src $commit torch $torch_pin" >"$stamp"
fi
"$venv/bin/python3" -m pip install -q --disable-pip-version-check pytest ml_dtypes

echo "onecat_tests: pip wheel (build folder build/wheel)"
"$python" -m pip wheel --no-deps --disable-pip-version-check -q "$root" -w "$scratch/dist"
# the wheel anew, then with its dependencies as a user installs it (those already in are kept): the test
# checks that they bring no upstream vLLM over the fork
"$venv/bin/python3" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$scratch"/dist/volt8-*.whl
"$venv/bin/python3" -m pip install -q --disable-pip-version-check "$scratch"/dist/volt8-*.whl

# Nothing of the caller's volt8 set-up may stand in for the installed package.
for variable in $(env | sed -n 's/^\(VOLT8_[A-Z0-9_]*\)=.*/\1/p'); do unset "$variable"; done
unset PYTHONPATH
cd "$scratch"
"$venv/bin/python3" -m pytest -q -p no:cacheprovider -c "$root/pyproject.toml" --rootdir "$root" "$root/tests/onecat" "$@"
