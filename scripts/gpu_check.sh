#!/usr/bin/env bash
# The whole GPU check in two halves.
#   scripts/gpu_check.sh prepare   on a build machine (this repo's set-up, NVRTC 12 present): builds,
#                                  fills a compute_70 kernel cache for every shape the GPU suite uses,
#                                  and gathers binaries, that cache and the shared libraries a bare
#                                  CUDA machine lacks into .carry/.
#   scripts/gpu_check.sh run       on the GPU machine (only the CUDA toolkit, no network): runs the GPU
#                                  suite with the carried compute_70 PTX (JIT-compiled by the driver),
#                                  again with native code from that machine's NVRTC, then under
#                                  compute-sanitizer memcheck and racecheck. Logs go to $OUT (or out/).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
carry="$root/.carry"
mode="${1:-}"

# Shapes of the GPU suites: the seed shape (E=512 and E=64) at offsets 0/32/64/96,
# H=2048/I=128, H=4096/I=256, and online (1,128) scales.
gpu_test_shapes=(
  "num_experts=512,intermediate_offset=0" "num_experts=512" "num_experts=512,intermediate_offset=64"
  "num_experts=512,intermediate_offset=96"
  "num_experts=64,intermediate_offset=0" "num_experts=64,intermediate_offset=32"
  "num_experts=64,intermediate_offset=64" "num_experts=64,intermediate_offset=96"
  "hidden=2048,intermediate=128,num_experts=64,intermediate_offset=0"
  "hidden=4096,intermediate=256,num_experts=64,intermediate_offset=0"
  "num_experts=64,block_n=1,intermediate_offset=0"
)

prepare() {
  set -e
  "$root/scripts/bootstrap.sh"
  cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  local targets=(volt8 volt8_cli)
  for source in "$root"/tests/gpu/test_*.c; do targets+=("gpu_$(basename "${source%.c}")"); done
  cmake --build "$root/build" -j "$(nproc)" --target "${targets[@]}" >/dev/null
  rm -rf "$carry"
  mkdir -p "$carry/bin" "$carry/libs" "$carry/cache70"
  local shape_args=()
  for shape in "${gpu_test_shapes[@]}"; do shape_args+=(--shape "$shape"); done
  "$root/build/volt8" compile --arch sm_70 --cache "$carry/cache70" "${shape_args[@]}" | tail -n 1
  cp "$root/build/volt8" "$root"/build/libvolt8.so* "$carry/bin/"
  cp "$root"/build/tests/gpu_test_* "$carry/bin/"
  # Every shared library the binaries load, except the C runtime's own, which the GPU machine has newer.
  ldd "$carry"/bin/* 2>/dev/null | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*|libz.so*) ;;
      libvolt8.so*) ;;
      *) cp -L "$lib" "$carry/libs/" ;;
    esac
  done
  du -sh "$carry" | awk '{print "gpu_check prepare: .carry is " $1}'
}

# GPU_CHECK_EXTRA (bash array, exported as lines in $GPU_CHECK_EXTRA_LINES) adds commands after the suites.
run() {
  local -a GPU_CHECK_EXTRA=()
  [ -n "${GPU_CHECK_EXTRA_LINES:-}" ] && mapfile -t GPU_CHECK_EXTRA <<<"$GPU_CHECK_EXTRA_LINES"
  local out="${OUT:-$root/out}"
  mkdir -p "$out"
  local work
  work="$(mktemp -d)"
  # Carried libraries only where the machine lacks them: its own newer copies win.
  mkdir -p "$work/libs"
  for lib in "$carry"/libs/*; do
    local name
    name="$(basename "$lib")"
    ldconfig -p | grep -q " $name " || ln -s "$lib" "$work/libs/$name"
  done
  export LD_LIBRARY_PATH="$carry/bin:$work/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="/usr/local/cuda/bin:$PATH"
  cp -r "$carry/cache70" "$work/cache70"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
  local summary="$out/summary.txt"
  : >"$summary"
  step() {
    local name="$1"
    shift
    local start=$SECONDS
    timeout "${STEP_TIMEOUT:-300}" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    printf '%-28s rc=%d %4ds  %s\n' "$name" "$rc" $((SECONDS - start)) "$(grep -E 'Synthesis|ERROR SUMMARY' "$out/$name.log" | tail -n 1)" |
      tee -a "$summary"
  }
  local suite name
  for suite in "$carry"/bin/gpu_test_*; do
    name="$(basename "$suite")"
    name="${name#gpu_test_}"
    if [ "$name" = bench ]; then  # times cuBLASLt against native code; its support kernels are not in cache70
      step "$name.native" env VOLT8_CACHE_DIR="$work/native" "$suite" --jobs=1
      continue
    fi
    step "$name.sm70_ptx" env VOLT8_TARGET_ARCH=sm_70 VOLT8_CACHE_DIR="$work/cache70" "$suite" --jobs=1
    step "$name.native" env VOLT8_CACHE_DIR="$work/native" "$suite" --jobs=1
  done
  for tool in memcheck racecheck; do
    for suite in "$carry"/bin/gpu_test_*; do
      name="$(basename "$suite")"
      name="${name#gpu_test_}"
      [ "$name" = bench ] && continue
      step "$name.$tool" env VOLT8_TARGET_ARCH=sm_70 VOLT8_CACHE_DIR="$work/cache70" VOLT8_GPU_TEST_QUICK=1 \
        compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 7 "$suite" --jobs=1
    done
  done
  for extra in "${GPU_CHECK_EXTRA[@]}"; do
    step "extra" bash -c "$extra"
  done
  echo "--- tails ---"
  for log in "$out"/*.log; do
    echo "== $(basename "$log")"
    tail -n 15 "$log"
  done
  cat "$summary"
  rm -rf "$work"
}

case "$mode" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: scripts/gpu_check.sh prepare|run" >&2; exit 2 ;;
esac
