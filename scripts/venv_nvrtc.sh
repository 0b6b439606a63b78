# Sourced by the scripts that run volt8 from a build: hands the NVRTC 12 of the project's .venv
# (scripts/bootstrap.sh) to the library through VOLT8_NVRTC_DIRS (the Makefile sources it too), unless the
# caller set that variable. Needs $root, the repository root.
if [ -z "${VOLT8_NVRTC_DIRS:-}" ]; then
  for venv_nvrtc_dir in "$root"/.venv/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib; do
    [ -e "$venv_nvrtc_dir/libnvrtc.so.12" ] && export VOLT8_NVRTC_DIRS="$venv_nvrtc_dir"
  done
  unset venv_nvrtc_dir
fi
