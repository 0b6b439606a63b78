#!/bin/bash
# The shared library exports exactly the functions the public header declares with VOLT8_API: no
# internal function or test hook, and nothing declared is missing. Usage: check_exports.sh LIBRARY HEADER.
set -euo pipefail
library=$1 header=$2
exported=$(nm -D --defined-only "$library" | awk '$2 ~ /^[TW]$/ {print $3}' | sort -u)
declared=$(tr '\n' ' ' < "$header" | grep -oE 'VOLT8_API [^;(]*\bvolt8_[a-z0-9_]+\(' | grep -oE 'volt8_[a-z0-9_]+\($' |
           tr -d '(' | sort -u)
failures=0
for name in $(comm -23 <(echo "$exported") <(echo "$declared")); do
  echo "$library exports $name, which $header does not declare"
  failures=$((failures + 1))
done
for name in $(comm -13 <(echo "$exported") <(echo "$declared")); do
  echo "$header declares $name, which $library does not export"
  failures=$((failures + 1))
done
[ "$failures" -eq 0 ] || { echo "check_exports: $failures difference(s)"; exit 1; }
echo "check_exports: $(echo "$exported" | wc -l) functions exported, each declared in $header"
