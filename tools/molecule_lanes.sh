#!/usr/bin/env bash
# `make test`'s checks and molecule scenarios, in two phases of lanes. Each argument is a lane: its items (scenario
# names, or "make:TARGET" to run `make TARGET` there) one after another; all lanes of a phase at once. The lanes before
# "--" run first (worker among them: it builds llama.cpp, which every later scenario and the integration tests reuse
# from the controller's cache; lint and unit tests beside it, on the other core), the lanes after it once they all
# passed. Every scenario has its own lab (bridge, subnet), and most of a scenario's time is spent waiting on its hosts,
# so lanes share two cores well.
# Each lane logs to tests/output/molecule/lane-N.log (phase 1: first-N.log); a lane's log is printed when it ends,
# whole if it failed, else its step lines and test summaries.
#   tools/molecule_lanes.sh "make:lint make:unit" worker -- "cluster default" "lsyncd shards mesh" "make:integration"
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

run_lanes() {  # log-prefix lane... : every lane at once; 0 when all passed
  local prefix=$1 lane index status=0
  shift
  local pids=() names=()
  for lane in "$@"; do
    index=${#pids[@]}
    # shellcheck disable=SC2086 # a lane is a space-separated list of scenario names
    run_scenarios $lane > "$logs/$prefix-$index.log" 2>&1 &
    pids+=("$!") names+=("$lane")
    echo "=== lane $prefix-$index started: $lane (log $logs/$prefix-$index.log)"
  done
  for index in "${!pids[@]}"; do
    if wait "${pids[$index]}"; then
      echo "=== lane $prefix-$index passed: ${names[$index]}"
      # Step lines, and pytest's summary lines (molecule's verify, the integration tests).
      grep -E '^=== |=+ .*[0-9]+ (passed|failed|error).* in [0-9.]+s' "$logs/$prefix-$index.log"
    else
      status=1
      echo "=== lane $prefix-$index FAILED: ${names[$index]}; its log:"
      cat "$logs/$prefix-$index.log"
    fi
  done
  return $status
}

first=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do first+=("$1"); shift; done
[ $# -gt 0 ] && shift
phase=$(date +%s)
run_lanes first "${first[@]}" || exit 1
echo "=== phase 1 (${first[*]}) took $(( $(date +%s) - phase )) s"
phase=$(date +%s)
run_lanes lane "$@" || exit 1
echo "=== phase 2 took $(( $(date +%s) - phase )) s"
