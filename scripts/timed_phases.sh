#!/usr/bin/env bash
# Runs the phases of `make test`: timed_phases.sh NAME COMMAND [NAME COMMAND]...
# Each COMMAND runs with bash -c, in turn, its output as it comes, and prints one line when done,
#   make test: phase NAME 212 s (CPU 380 s)
# (wall seconds, then the CPU seconds, user and system, of everything it ran); a total line ends
# the run. A NAME ending in "&" (wheel&) starts its phase in the background instead, alongside
# the phases after it, for a phase that leaves a core idle much of the time; its output is kept
# and shown, with its timing line, when the phases in turn are done. A failing phase stops the
# run with its timing line and its exit status. .ci/run checks that every phase printed its line
# (scripts/check_phase_lines.py).
set -uo pipefail
[ $(($# % 2)) -eq 0 ] && [ $# -gt 0 ] || { echo "usage: timed_phases.sh NAME[&] COMMAND [NAME[&] COMMAND]..." >&2; exit 2; }

scratch=$(mktemp -d)
background_names=() background_pids=()
cleanup() {
  for pid in "${background_pids[@]}"; do kill -- "-$pid" 2>/dev/null; done
  rm -rf "$scratch"
}
trap cleanup EXIT

now() { date +%s.%N; }
seconds_since() { awk -v now="$(now)" -v then="$1" 'BEGIN { printf "%.0f", now - then }'; }

# A phase runs in a bash that, as it exits, leaves `times` (its own CPU and that of everything it
# waited for) in PREFIX.times and the moment in PREFIX.ended: phase.sh PREFIX COMMAND.
cat >"$scratch/phase.sh" <<'PHASE'
trap 'times >"$1.times"; date +%s.%N >"$1.ended"' EXIT
eval "$2"
PHASE

# The timing line of a finished phase; returns its status.
report() {
  local name=$1 started=$2 status=$3
  local wall cpu
  wall=$(awk -v ended="$(cat "$scratch/$name.ended" 2>/dev/null || now)" -v then="$started" 'BEGIN { printf "%.0f", ended - then }')
  cpu=$(awk '{ for (i = 1; i <= 2; i++) { split($i, part, "m"); total += part[1] * 60 + part[2] } }
             END { printf "%.0f\n", total }' "$scratch/$name.times" 2>/dev/null || echo 0)
  echo "$cpu" >"$scratch/$name.cpu"
  echo "make test: phase $name $wall s (CPU $cpu s)$([ "$status" -eq 0 ] || echo ", FAILED with status $status")"
  return "$status"
}

started_all=$(now)
while [ $# -gt 0 ]; do
  name=$1 command=$2
  shift 2
  if [ "${name%&}" != "$name" ]; then
    name=${name%&}
    echo "make test: phase $name starts in the background"
    now >"$scratch/$name.started"
    # its own process group, so that a failure elsewhere can stop all of it
    setsid bash "$scratch/phase.sh" "$scratch/$name" "$command" >"$scratch/$name.log" 2>&1 &
    background_names+=("$name") background_pids+=($!)
    continue
  fi
  echo "make test: phase $name starts"
  started=$(now)
  bash "$scratch/phase.sh" "$scratch/$name" "$command"
  report "$name" "$started" $? || exit $?
done
for i in "${!background_names[@]}"; do
  name=${background_names[$i]}
  wait "${background_pids[$i]}"
  status=$?
  echo "make test: output of phase $name (run in the background):"
  cat "$scratch/$name.log"
  report "$name" "$(cat "$scratch/$name.started")" $status || exit $?
done
background_pids=()
total_cpu=$(cat "$scratch"/*.cpu | awk '{ total += $1 } END { printf "%.0f", total }')
echo "make test: all phases $(seconds_since "$started_all") s (CPU $total_cpu s)"
