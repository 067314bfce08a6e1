#!/usr/bin/env bash
# `make test`'s checks and molecule scenarios, in lanes. Each argument is a lane: its items one after another, every
# lane of a group at once. An item is a scenario name (`molecule test -s NAME`), NAME:STEP,STEP... (those molecule steps
# alone, in that order, on the scenario's lab: a scenario's test sequence can be cut in two across the phases; a failed
# step still removes the lab when a destroy step was to follow), or make:TARGET (`make TARGET`).
#   tools/molecule_lanes.sh [--beside LANE...] [--first] LANE... --then LANE... [--behind LANE...]   ("--" is --then)
# The first lanes build what the later ones use (the worker scenario's converge builds llama.cpp once into the
# controller's cache); the lanes after --then start once the first lanes all passed, and so do the --behind lanes,
# at nice 5: the --then lanes are the long ones, and they get the cores first (a lane's labs run at its nice level,
# since their hosts are its children). A --beside lane starts with the first lanes and does not hold the later ones
# back (the checks); it runs at nice 10, so that the build, which the rest waits for, gets the cores first. The run
# passes when every lane passed, and no later lane starts once a first lane has failed; within a lane, a failed item
# does not keep the next ones from running (each reports its own result). Every scenario has its own lab
# (bridge, subnet), and most of a scenario's time is spent waiting on its hosts, so lanes share two cores well.
# Logs: tests/output/molecule/{beside,first,lane}-N.log (or under $MOLECULE_LANES_LOGS); a lane's log is printed when
# it ends, whole if it failed, else its step lines and test summaries.
#   tools/molecule_lanes.sh --beside "make:lint make:unit" --first worker:destroy,converge cluster:destroy,create \
#     --then cluster:converge,idempotence,verify,destroy --behind "worker:idempotence,verify,destroy shards" \
#     "make:integration"
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
molecule=${MOLECULE:-.venv/bin/molecule}
# The first lanes build llama.cpp before any scenario that needs it: in molecule's verifiers a needs_llama test that
# skips fails (molecule/_shared/needs_llama.py; `make integration` sets it for its own tests).
molecule() { LLAMARPC_REQUIRE_LLAMA=1 "$molecule" "$@"; }
logs=${MOLECULE_LANES_LOGS:-tests/output/molecule}
mkdir -p "$logs"
rm -f "$logs/failures.txt" "$logs/failed-tests.txt"
# Every failed test of a scenario's verify, a line each (molecule/conftest.py), in the digest at the end.
LLAMARPC_FAILED_TESTS=$(realpath -m "$logs/failed-tests.txt")
export LLAMARPC_FAILED_TESTS

step_clock() {  # scenario start : pass molecule's output through, and time each step it starts ("=== ... step")
  awk -v scenario="$1" -v start="$2" '
    { print; fflush(); line = $0; gsub(/\033\[[0-9;]*m/, "", line) }
    line ~ /[a-z_]+: Executing$/ {
      "date +%s" | getline now; close("date +%s")
      sub(/: Executing$/, "", line); n = split(line, word, " ")
      printf "=== %s step %s at +%d s\n", scenario, word[n], now - start; fflush()
    }'
}

run_item() {  # item start : one lane item (see the header)
  local item=$1 start=$2 scenario step steps index step_start
  if [[ $item == make:* ]]; then
    echo "=== make ${item#make:}"
    make --no-print-directory "${item#make:}"
  elif [[ $item == *:* ]]; then
    scenario=${item%%:*}
    IFS=, read -ra steps <<< "${item#*:}"
    echo "=== molecule scenario $scenario, steps ${steps[*]}"
    for index in "${!steps[@]}"; do
      step=${steps[$index]}
      step_start=$(date +%s)
      if ! PYTHONUNBUFFERED=1 molecule "$step" -s "$scenario" 2>&1 | step_clock "$scenario" "$start"; then
        # As `molecule test` does: a failed step leaves the lab's evidence (the cleanup playbook) and still removes the
        # lab when a destroy step was to follow.
        molecule cleanup -s "$scenario" 2>&1 | grep -E '=== lab evidence' | tr -d '"'
        if [[ " ${steps[*]:index+1} " == *" destroy "* ]]; then "$molecule" destroy -s "$scenario" > /dev/null 2>&1; fi
        return 1
      fi
      # Measured around the call: molecule's own "Executing" line of a verify step can reach the log late.
      echo "=== $scenario step $step took $(( $(date +%s) - step_start )) s"
    done
  else
    echo "=== molecule scenario $item"
    PYTHONUNBUFFERED=1 molecule test -s "$item" 2>&1 | step_clock "$item" "$start"
  fi
}

run_items() {  # item... : one after another; a failed item does not stop the others (each has its own lab), the lane
  local item start items_failed=()  # fails when one did, and says which
  for item in "$@"; do
    start=$(date +%s)
    if run_item "$item" "$start"; then
      echo "=== $item passed in $(( $(date +%s) - start )) s"
    else
      echo "=== $item FAILED after $(( $(date +%s) - start )) s"
      items_failed+=("$item")
    fi
  done
  [ ${#items_failed[@]} -eq 0 ] || { echo "=== lane items FAILED: ${items_failed[*]} (of $#)"; return 1; }
}

pids=() names=() tags=()
start_lanes() {  # log-prefix first-index nice lane... : start every lane in the background, at that nice level
  local prefix=$1 index=$2 nice=$3 lane
  shift 3
  for lane in "$@"; do
    # shellcheck disable=SC2086 # a lane is a space-separated list of items
    (renice -n "$nice" -p "$BASHPID" > /dev/null; run_items $lane) > "$logs/$prefix-$index.log" 2>&1 &
    pids+=("$!") names+=("$lane") tags+=("$prefix-$index")
    echo "=== lane $prefix-$index started$([ "$nice" = 0 ] || echo " (nice $nice)"): $lane (log $logs/$prefix-$index.log)"
    index=$((index + 1))
  done
}

failed=0 failed_tags=()
wait_lane() {  # index : wait for that lane and report it; 1 if it failed
  local index=$1
  if wait "${pids[$index]}"; then
    echo "=== lane ${tags[$index]} passed: ${names[$index]}"
    # Step lines, and pytest's summary lines (molecule's verify, the integration tests).
    grep -E '^=== |=+ .*[0-9]+ (passed|failed|error).* in [0-9.]+s' "$logs/${tags[$index]}.log"
  else
    failed=1 failed_tags+=("${tags[$index]}")
    echo "=== lane ${tags[$index]} FAILED: ${names[$index]}; its log:"
    cat "$logs/${tags[$index]}.log"
    return 1
  fi
}

beside=() first=() later=() behind=() group=first
for arg in "$@"; do
  case $arg in
    --beside) group=beside ;;
    --first) group=first ;;
    --then | --) group=later ;;
    --behind) group=behind ;;
    *)
      case $group in
        beside) beside+=("$arg") ;; first) first+=("$arg") ;; later) later+=("$arg") ;; *) behind+=("$arg") ;;
      esac
      ;;
  esac
done
phase=$(date +%s)
start_lanes beside 0 10 "${beside[@]}"
reported=() # lanes already waited for
held=${#pids[@]}  # the beside lanes are pids[0..held-1]
start_lanes first 0 0 "${first[@]}"
for ((index = held; index < ${#pids[@]}; index++)); do wait_lane "$index"; reported+=("$index"); done
echo "=== phase 1 (${first[*]}) took $(( $(date +%s) - phase )) s"
# A beside lane that has already ended is reported now: one that failed stops the run before the later lanes.
for ((index = 0; index < held; index++)); do
  if ! kill -0 "${pids[$index]}" 2>/dev/null; then wait_lane "$index"; reported+=("$index"); fi
done
if [ "$failed" = 0 ]; then
  phase=$(date +%s)
  start_lanes lane 0 0 "${later[@]}"
  start_lanes lane "${#later[@]}" 5 "${behind[@]}"
else
  # A first lane's item that stops before a destroy step leaves its lab up for the later lanes, which will not run.
  for lane in "${first[@]}"; do
    for item in $lane; do
      if [[ $item == *:* && $item != make:* && ,${item#*:} != *,destroy ]]; then
        echo "=== removing the lab of ${item%%:*}: the later lanes will not run"
        "$molecule" destroy -s "${item%%:*}" > /dev/null 2>&1
      fi
    done
  done
fi
for ((index = 0; index < ${#pids[@]}; index++)); do
  [[ " ${reported[*]} " == *" $index "* ]] || wait_lane "$index"
done
if [ "$failed" = 1 ]; then
  # The failures in a few lines at the end, where a reader of a long CI log looks first (each failed lane's log was
  # printed whole above): pytest's summary lines with their first assertion lines, Ansible's failed tasks, the items
  # that failed and the lab evidence their cleanup left. tools/steps.sh prints the file again as the run's last words.
  {
    [ ! -s "$LLAMARPC_FAILED_TESTS" ] || { echo "--- failed tests of the scenarios' verify"; cat "$LLAMARPC_FAILED_TESTS"; }
    for tag in "${failed_tags[@]}"; do
      echo "--- $tag ($logs/$tag.log)"
      # Molecule boxes its steps' output ("  │ " before each line).
      sed -E 's/\x1b\[[0-9;]*m//g; s/^ *│ ?//' "$logs/$tag.log" | grep -E \
        '^(FAILED|ERROR) [^-]|^E  +[^ ]|fatal: \[|FAILED! =>|^=== .*(FAILED|lab evidence)|^=+ .*(failed|error).* in [0-9.]+s' |
        awk '/^E  / && ++asserted > 12 { next } { print substr($0, 1, 400) }' | head -n 60
    done
  } > "$logs/failures.txt"
  echo "=== what failed (also in $logs/failures.txt):"
  cat "$logs/failures.txt"
  exit 1
fi
echo "=== phase 2 took $(( $(date +%s) - phase )) s"
