#!/usr/bin/env bash
# Unit and sanity tests on the older ansible-core releases meta/runtime.yml admits (tools/ansible_versions.sh: the
# project's own .venv runs the newest, on Python 3.13, for everything; molecule and the integration tests use that one).
# Each release gets a virtualenv of its own under .cache/matrix, on a Python it supports, found on PATH or under pyenv;
# all run at once.
#   tools/ansible_matrix.sh              # every entry of OLDER_RELEASES
#   MATRIX="2.19.14:3.11" tools/ansible_matrix.sh
# A Python missing from the machine is reported as SKIPPED, never as passed (Debian 12 itself has only 3.11); with
# MATRIX_REQUIRE=1 (`make matrix`, so `make test` and CI) a skipped entry fails the run: the README promises unit and
# sanity tests on every release, so a machine without the Pythons must say so rather than pass.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/ansible_versions.sh
. tools/ansible_versions.sh
MATRIX=${MATRIX:-$OLDER_RELEASES}
require=${MATRIX_REQUIRE:-0}
skipped=77  # run_entry's status when the entry's Python is missing
logs=tests/output/matrix
mkdir -p "$logs" .cache/matrix
pin() { grep -i "^$1==" requirements.txt; }  # the project's pin of a test dependency

run_entry() {  # core version, python version
  local core=$1 py=$2 venv=.cache/matrix/core-$1 python stamp packages start
  start=$(date +%s)
  python=$(find_python "$py")
  if [ -z "$python" ]; then
    echo "SKIPPED: no Python $py on this machine (on PATH as python$py or under ${PYENV_ROOT:-$HOME/.pyenv}/versions)"
    return $skipped
  fi
  packages=("ansible-core==$core" "$(pin pytest)" "$(pin hypothesis)" "$(pin gguf)")
  stamp="${packages[*]}"
  if [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$venv" && "$python" -m venv "$venv" && "$venv/bin/pip" install -q "${packages[@]}" && echo "$stamp" > "$venv/.stamp" \
      || return 1
  fi
  echo "ansible-core $core on $("$venv/bin/python" --version)"
  ANSIBLE_COLLECTIONS_PATH=$PWD/.collections "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/unit || return 1
  SANITY_VENV=$PWD/$venv SANITY_PYTHON=$py tools/sanity.sh || return 1
  echo "ansible-core $core: unit and sanity passed in $(( $(date +%s) - start )) s"
}

pids=() names=()
for entry in $MATRIX; do
  run_entry "${entry%%:*}" "${entry##*:}" > "$logs/core-${entry%%:*}.log" 2>&1 &
  pids+=("$!") names+=("$entry")
done
status=0
for index in "${!pids[@]}"; do
  core=${names[$index]%%:*} py=${names[$index]##*:}
  log=$logs/core-$core.log
  wait "${pids[$index]}"
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "=== ansible-core $core (Python $py) passed"
    grep -E '^=+ .*(passed|failed).* in [0-9.]+s|^[0-9]+ passed|passed in [0-9]+ s$' "$log"
  elif [ $rc -eq $skipped ]; then
    echo "=== ansible-core $core (Python $py) SKIPPED: $(grep -m1 '^SKIPPED: ' "$log" | cut -d' ' -f2-)"
    if [ "$require" = 1 ]; then
      status=1
      echo "=== MATRIX_REQUIRE=1: a skipped entry fails (install Python $py, e.g. with pyenv, or run with MATRIX_REQUIRE=0)"
    fi
  else
    status=1
    echo "=== ansible-core $core (Python $py) FAILED; its log:"
    cat "$log"
  fi
done
exit $status
