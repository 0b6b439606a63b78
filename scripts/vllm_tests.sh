#!/usr/bin/env bash
# make test-vllm: the vLLM plugin's tests (tests/vllm) inside the pinned vLLM, on the CPU.
#   - a venv with vLLM (VLLM_VERSION, default the pinned 0.33.0, from PyPI: about 9 GB and a few
#     minutes the first time), pytest and ml_dtypes, made once in .venv-vllm (ignored by git), or the
#     one VLLM_VENV names;
#   - the volt8 wheel of this tree built (`pip wheel .`, as make wheel) and installed into it, so vLLM's
#     plugin loader sees the wheel's own entry point;
#   - pytest tests/vllm from a scratch folder, against the installed package.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python3}"
version="${VLLM_VERSION:-0.33.0}"
venv="${VLLM_VENV:-$root/.venv-vllm}"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/volt8-vllm-tests.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

has_vllm() {
  [ -x "$venv/bin/python3" ] && "$venv/bin/python3" - "$version" <<'PY' 2>/dev/null
import importlib.metadata, sys
sys.exit(0 if importlib.metadata.version("vllm") == sys.argv[1] else 1)
PY
}
if ! has_vllm; then
  echo "vllm_tests: installing vllm==$version into $venv (once; several GB)"
  python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check "vllm==$version"
fi
"$venv/bin/python3" -m pip install -q --disable-pip-version-check pytest ml_dtypes

echo "vllm_tests: pip wheel (build folder build/wheel)"
"$python" -m pip wheel --no-deps --disable-pip-version-check -q "$root" -w "$scratch/dist"
"$venv/bin/python3" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$scratch"/dist/volt8-*.whl

# Nothing of the caller's volt8 set-up may stand in for the installed package.
for variable in $(env | sed -n 's/^\(VOLT8_[A-Z0-9_]*\)=.*/\1/p'); do unset "$variable"; done
unset PYTHONPATH
cd "$scratch"
"$venv/bin/python3" -m pytest -q -p no:cacheprovider -c "$root/pyproject.toml" --rootdir "$root" "$root/tests/vllm"
