#!/usr/bin/env bash
# `make test`'s steps, one after another, each timed, stopping at the first failure: tools/steps.sh setup lint unit
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
total=$(date +%s)
for step in "$@"; do
  start=$(date +%s)
  echo "=== step $step"
  if ! make --no-print-directory "$step"; then
    echo "=== step $step FAILED after $(( $(date +%s) - start )) s"
    exit 1
  fi
  echo "=== step $step took $(( $(date +%s) - start )) s"
done
echo "=== steps $* took $(( $(date +%s) - total )) s"
