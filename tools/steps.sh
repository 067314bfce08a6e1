#!/usr/bin/env bash
# `make test`'s steps, one after another, each timed, stopping at the first failure: tools/steps.sh setup lint unit
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
total=$(date +%s)
# STEPS_CPU_ACCOUNT=FILE: after the setup step, the CPU seconds of each step and, at the end, by command
# (tools/cpu_account.sh): the machine has two cores, so CPU, not waiting, is what `make test`'s budget is made of.
account=${STEPS_CPU_ACCOUNT:-}
cpu_seconds() { tools/cpu_account.sh report "$account" 0 | awk '/CPU seconds/ {print $4}'; }
# STEPS_FAILURES=FILE: a digest of what failed, which a step writes (tools/molecule_lanes.sh), printed again as the
# run's last lines when it fails: a CI log is read from its end.
failures=${STEPS_FAILURES:-}
[ -z "$failures" ] || rm -f "$failures"
finish() {
  # Only accounting this run started is reported and turned off (not the system's own, if it keeps one).
  if [ -n "$account" ] && [ -s "$account" ]; then tools/cpu_account.sh report "$account" 15; tools/cpu_account.sh stop; fi
  if [ -n "${failed_step:-}" ]; then
    if [ -n "$failures" ] && [ -s "$failures" ]; then echo "=== what failed in step $failed_step:"; cat "$failures"; fi
    echo "=== step $failed_step FAILED"
  fi
}
trap finish EXIT
for step in "$@"; do
  start=$(date +%s)
  echo "=== step $step"
  if ! make --no-print-directory "$step"; then
    echo "=== step $step FAILED after $(( $(date +%s) - start )) s"
    failed_step=$step
    exit 1
  fi
  echo "=== step $step took $(( $(date +%s) - start )) s"
  if [ -n "$account" ]; then
    if [ "$step" = setup ]; then
      tools/cpu_account.sh start "$account"
      cpu_before=0
    elif [ -s "$account" ]; then
      cpu_now=$(cpu_seconds)
      echo "=== step $step used $(( ${cpu_now%.*} - cpu_before )) CPU seconds (in processes that ended)"
      cpu_before=${cpu_now%.*}
    fi
  fi
done
echo "=== steps $* took $(( $(date +%s) - total )) s"
