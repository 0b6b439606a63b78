#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer included),
# with the fuzz regression inputs replayed, then every fuzz target run briefly (tests/fuzz).
# Builds in its own folder: build-asan, or $VOLT8_ASAN_BUILD_DIR.
#   VOLT8_FUZZ_SMOKE_SECONDS  seconds each fuzz target runs (default 3, a smoke test: the regression
#                             inputs are replayed in every run, and tests/fuzz/run_fuzzers.sh fuzzes
#                             for long; 0 skips the fuzz step)
#   VOLT8_COMPILE_VARIANT_STRIDE  test_compile_variants compiles every Nth variant (default 48: NVRTC
#                             itself is not instrumented, and the plain run compiles them all)
#   JOBS                      parallel builds and tests (default: nproc)
# install_consumer and example_forward are left out: they link the shared library (with the shared
# ASan runtime) into a program that would carry a second, static one, which the ASan runtime
# refuses; the plain `make test` run covers them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${VOLT8_ASAN_BUILD_DIR:-$root/build-asan}"
jobs="${JOBS:-$(nproc)}"
smoke_seconds="${VOLT8_FUZZ_SMOKE_SECONDS:-3}"
# shellcheck source=scripts/venv_nvrtc.sh
. "$root/scripts/venv_nvrtc.sh"

command -v clang >/dev/null || { echo "sanitized_tests: clang is needed (scripts/bootstrap.sh installs it)" >&2; exit 1; }
# The shared library links the ASan runtime as a shared object (-shared-libasan); the test programs
# link it statically, as clang does by default, and use the static archive of the runtime.
runtime_dir="$(dirname "$(clang -print-file-name=libclang_rt.asan-x86_64.so)")"
sanitizers="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
CC=clang cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DVOLT8_BUILD_BENCH=OFF \
  -DVOLT8_FUZZ=ON -DVOLT8_FUZZ_SMOKE_SECONDS="$smoke_seconds" \
  -DCMAKE_C_FLAGS="-O1 -g -fno-omit-frame-pointer $sanitizers" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitizers" \
  -DCMAKE_SHARED_LINKER_FLAGS="$sanitizers -shared-libasan -Wl,-rpath,$runtime_dir" >/dev/null
cmake --build "$build" -j "$jobs" >/dev/null

export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:detect_invalid_pointer_pairs=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export VOLT8_COMPILE_VARIANT_STRIDE="${VOLT8_COMPILE_VARIANT_STRIDE:-48}"
cd "$build"
echo "sanitized_tests: CPU suites under ASan + UBSan ($build; every ${VOLT8_COMPILE_VARIANT_STRIDE}th kernel variant compiled)"
ctest --output-on-failure -L cpu -E '^(install_consumer|example_forward)$' -j "$jobs"
if [ "$smoke_seconds" -gt 0 ]; then
  echo "sanitized_tests: each fuzz target for ${smoke_seconds} s"
  ctest --output-on-failure -L fuzz -j "$jobs"
fi
