#!/usr/bin/env bash
# `make test`'s molecule step: the scenarios before "--" one after another (worker first: it builds llama.cpp, which
# the others reuse from the controller's cache), then every later argument as a lane of its own, all lanes at once,
# each lane's scenarios one after another. Every scenario has its own lab (bridge, subnet), and most of a scenario's
# time is spent waiting on its hosts, so two lanes share two cores well.
# A lane item "make:TARGET" runs `make TARGET` there instead of a scenario (the integration tests beside the lanes).
# Each lane logs to tests/output/molecule/lane-N.log; a lane's log is printed when it ends, whole if it failed,
# else its step lines and test summaries.
#   tools/molecule_lanes.sh worker -- "cluster default" "lsyncd shards mesh" "make:integration"
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
molecule=${MOLECULE:-.venv/bin/molecule}
logs=tests/output/molecule
mkdir -p "$logs"

step_clock() {  # scenario start : pass molecule's output through, and time each step it starts ("=== ... step")
  awk -v scenario="$1" -v start="$2" '
    { print; fflush(); line = $0; gsub(/\033\[[0-9;]*m/, "", line) }
    line ~ /[a-z_]+: Executing$/ {
      "date +%s" | getline now; close("date +%s")
      sub(/: Executing$/, "", line); n = split(line, word, " ")
      printf "=== %s step %s at +%d s\n", scenario, word[n], now - start; fflush()
    }'
}

run_scenarios() {  # scenario or make:TARGET... : one after another, stop at the first failure
  local scenario start
  for scenario in "$@"; do
    start=$(date +%s)
    if [[ $scenario == make:* ]]; then
      echo "=== make ${scenario#make:}"
      make --no-print-directory "${scenario#make:}"
    else
      echo "=== molecule scenario $scenario"
      PYTHONUNBUFFERED=1 "$molecule" test -s "$scenario" 2>&1 | step_clock "$scenario" "$start"
    fi || { echo "=== $scenario FAILED after $(( $(date +%s) - start )) s"; return 1; }
    echo "=== $scenario passed in $(( $(date +%s) - start )) s"
  done
}

first=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do first+=("$1"); shift; done
[ $# -gt 0 ] && shift
run_scenarios "${first[@]}" || exit 1

pids=() names=()
for lane in "$@"; do
  index=${#pids[@]}
  # shellcheck disable=SC2086 # a lane is a space-separated list of scenario names
  run_scenarios $lane > "$logs/lane-$index.log" 2>&1 &
  pids+=("$!") names+=("$lane")
  echo "=== lane $index started: $lane (log $logs/lane-$index.log)"
done

status=0
for index in "${!pids[@]}"; do
  if wait "${pids[$index]}"; then
    echo "=== lane $index passed: ${names[$index]}"
    # Step lines, and pytest's summary lines (molecule's verify, the integration tests).
    grep -E '^=== |=+ .*[0-9]+ (passed|failed|error).* in [0-9.]+s' "$logs/lane-$index.log"
  else
    status=1
    echo "=== lane $index FAILED: ${names[$index]}; its log:"
    cat "$logs/lane-$index.log"
  fi
done
exit $status
