#!/usr/bin/env bash
# The multi-threaded tests under ThreadSanitizer: tests/test_concurrency.c, built as a plain program
# (Criterion's sandbox cannot map its arena under TSan). Its threads share one volt8_ctx while
# generating code, compiling through NVRTC and the disk cache, loading and planning checkpoints,
# looking up tuning tables and failing; other threads create and destroy contexts.
# Builds in its own folder: build-tsan, or $VOLT8_TSAN_BUILD_DIR. JOBS: parallel builds.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${VOLT8_TSAN_BUILD_DIR:-$root/build-tsan}"
jobs="${JOBS:-$(nproc)}"
# shellcheck source=scripts/venv_nvrtc.sh
. "$root/scripts/venv_nvrtc.sh"

command -v clang >/dev/null || { echo "tsan_tests: clang is needed (scripts/bootstrap.sh installs it)" >&2; exit 1; }
CC=clang cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DVOLT8_BUILD_BENCH=OFF \
  -DVOLT8_STANDALONE_CONCURRENCY=ON \
  -DCMAKE_C_FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=thread" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
cmake --build "$build" -j "$jobs" --target concurrency_standalone >/dev/null

export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
echo "tsan_tests: tests/test_concurrency.c under ThreadSanitizer ($build)"
"$build/tests/fuzz/concurrency_standalone"
