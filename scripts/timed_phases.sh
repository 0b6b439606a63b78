#!/usr/bin/env bash
# Runs the phases of `make test` in turn: timed_phases.sh NAME COMMAND [NAME COMMAND]...
# Each COMMAND runs with bash -c, its output as it comes; then one line per phase,
#   make test: phase NAME 212 s (CPU 380 s)
# (wall seconds, then the CPU seconds, user and system, of everything it ran), and a total line
# at the end. A failing phase stops the run with its timing line and its exit status.
# .ci/run checks that every phase printed its line (scripts/check_phase_lines.py).
set -uo pipefail
[ $(($# % 2)) -eq 0 ] && [ $# -gt 0 ] || { echo "usage: timed_phases.sh NAME COMMAND [NAME COMMAND]..." >&2; exit 2; }

times_file=$(mktemp)
trap 'rm -f "$times_file" "$times_file.before" "$times_file.after"' EXIT
# CPU seconds of the children waited for so far: the second line of bash's `times`, which has to
# run in this shell (in a $(...) subshell it would see no children).
children_cpu_seconds() {
  times >"$times_file"
  sed -n 2p "$times_file" | awk '{ total = 0
    for (i = 1; i <= 2; i++) { split($i, part, "m"); total += part[1] * 60 + part[2] }
    printf "%.1f", total }'
}
now() { date +%s.%N; }
seconds_since() { awk -v now="$(now)" -v then="$1" 'BEGIN { printf "%.0f", now - then }'; }

started_all=$(now)
while [ $# -gt 0 ]; do
  name=$1 command=$2
  shift 2
  echo "make test: phase $name starts"
  started=$(now)
  children_cpu_seconds >"$times_file.before"
  bash -c "$command"
  status=$?
  children_cpu_seconds >"$times_file.after"
  cpu=$(awk -v after="$(cat "$times_file.after")" -v before="$(cat "$times_file.before")" 'BEGIN { printf "%.0f", after - before }')
  echo "make test: phase $name $(seconds_since "$started") s (CPU $cpu s)$([ $status -eq 0 ] || echo ", FAILED with status $status")"
  [ $status -eq 0 ] || exit $status
done
children_cpu_seconds >"$times_file.after"
echo "make test: all phases $(seconds_since "$started_all") s (CPU $(awk '{ printf "%.0f", $1 }' "$times_file.after") s)"
