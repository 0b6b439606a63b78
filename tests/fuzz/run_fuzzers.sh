#!/usr/bin/env bash
# Runs the libFuzzer targets for a while and prints executions and findings per target.
# Usage: tests/fuzz/run_fuzzers.sh [-b BUILD_DIR] [-t SECONDS] [-j PARALLEL] [TARGET...]
#   BUILD_DIR  a build configured with CC=clang -DVOLT8_FUZZ=ON (default build-asan, which
#              scripts/sanitized_tests.sh makes); SECONDS per target (default 600); PARALLEL targets
#              at once (default 2); TARGET: safetensors index config tuning_table cache_entry shape choice
#              forward_describe expert_shard environment.
# New inputs accumulate in BUILD_DIR/tests/fuzz/corpus/<target>, crashes in .../artifacts/<target>/,
# logs in .../logs/<target>.log. A crash input belongs in tests/fuzz/regressions/<target>/ once fixed.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-asan"
seconds=600
parallel=2
while getopts "b:t:j:" option; do
  case "$option" in
    b) build="$(cd "$OPTARG" && pwd)" ;;
    t) seconds="$OPTARG" ;;
    j) parallel="$OPTARG" ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors index config tuning_table cache_entry shape choice forward_describe expert_shard
                                     environment)

fuzz="$build/tests/fuzz"
export LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
mkdir -p "$fuzz/logs"
run_one() {
  local target="$1"
  mkdir -p "$fuzz/corpus/$target" "$fuzz/artifacts/$target"
  "$fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$fuzz/artifacts/$target/" \
    "$fuzz/corpus/$target" "$root/tests/fuzz/seeds/$target" "$root/tests/fuzz/regressions/$target" \
    >"$fuzz/logs/$target.log" 2>&1 || true
}

running=0
for target in "${targets[@]}"; do
  [ -x "$fuzz/fuzz_$target" ] || { echo "no $fuzz/fuzz_$target: configure with CC=clang -DVOLT8_FUZZ=ON" >&2; exit 1; }
  run_one "$target" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

status=0
for target in "${targets[@]}"; do
  log="$fuzz/logs/$target.log"
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  corpus=$(ls "$fuzz/corpus/$target" | wc -l)
  crashes=$(find "$fuzz/artifacts/$target" -type f | wc -l)
  printf '%-14s %12s executions  %6s corpus inputs  %3s crash inputs\n' "$target" "$runs" "$corpus" "$crashes"
  [ "$crashes" -eq 0 ] || status=1
done
exit $status
