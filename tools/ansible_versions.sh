# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are read by the scripts that source this file
# Sourced by tools/setup.sh and tools/ansible_matrix.sh: which ansible-core releases the project tests, on which
# Python each runs, and how a Python is found. meta/runtime.yml's requires_ansible admits the oldest of them.
#
# The project's .venv (tools/setup.sh) runs the newest release, pinned in requirements.txt, on this Python: every
# linter, the unit tests, sanity, molecule and the integration tests.
VENV_PYTHON=3.13
# The older releases, each release:python, get unit and sanity tests in venvs of their own (tools/ansible_matrix.sh).
# The first is also the .venv's fallback on a box without VENV_PYTHON (tools/setup.sh; never in CI).
OLDER_RELEASES="2.19.14:3.11 2.20.10:3.12"

find_python() {  # X.Y -> a python executable of that version (on PATH as pythonX.Y, else under pyenv), or nothing
  local candidate
  for candidate in "$(command -v "python$1" 2>/dev/null)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/"python$1"; do
    # A base interpreter only: not a virtualenv's python (make puts the project's own .venv first on PATH, and
    # setup.sh removes that .venv when it rebuilds it).
    if [ -n "$candidate" ] && [ -x "$candidate" ] \
      && "$candidate" -c 'import sys, venv; sys.exit(sys.prefix != sys.base_prefix)' 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
}
