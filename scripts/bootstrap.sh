#!/usr/bin/env bash
# Installs what the build and the tests need, idempotently: Debian packages and a project-local
# .venv (NVRTC 12 for compute_70, and the Python used by test fixtures and oracles).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

packages=(libcjson-dev libcriterion-dev pkg-config cmake lua5.4 clang libclang-rt-dev dpkg-dev)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

venv="$root/.venv"
python_packages=(nvidia-cuda-nvrtc-cu12 safetensors numpy ml_dtypes pytest pyelftools)
if [ ! -x "$venv/bin/python3" ]; then
  echo "bootstrap: creating $venv"
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python3" -c "import safetensors, numpy, ml_dtypes, pytest, elftools" 2>/dev/null ||
   ! ls "$venv"/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 >/dev/null 2>&1; then
  echo "bootstrap: installing ${python_packages[*]} into .venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check "${python_packages[@]}"
fi
