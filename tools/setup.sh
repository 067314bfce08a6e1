#!/usr/bin/env bash
# Set-up shared by `make demo` and `make test` on a fresh Debian 12 box, as root: system packages, then a project
# virtualenv with the pinned Python dependencies. Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: run as root (the lab creates network namespaces, mounts and containers)" >&2
  exit 1
fi

# Controller packages: the lab (nspawn, debootstrap, namespaces, tc, loop ext4), SSH, FUSE, and the toolchain
# llama.cpp is built with.
APT_PACKAGES=(systemd-container debootstrap iproute2 nftables e2fsprogs openssh-client sshfs fuse3 rsync
              python3 python3-venv python3-dev ca-certificates git make cmake g++ libgomp1 procps psmisc
              nginx-light   # nginx: a real HTTP server with Range, for the shard download tests (loopback only)
              openssh-sftp-server  # the real sftp-server, over a pipe, for the SFTP range reader's tests
              shellcheck    # ansible-test sanity skips its shellcheck test, with only a warning, when it is missing
              prometheus    # promtool: the monitoring role's alert rules and generated configuration are tested with it
              acct)         # process accounting: `make test` reports where the machine's CPU went (tools/cpu_account.sh)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  # Packages only: no daemon (nginx, sshd, ...) may start on this machine because it was installed.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # acct's own service would account every process from the next boot on: only `make test` turns accounting on.
  if [[ " ${missing[*]} " == *" acct "* ]] && command -v systemctl > /dev/null; then
    systemctl disable acct.service > /dev/null 2>&1 || true
  fi
  # Only promtool is wanted from prometheus: its server, which the package starts, is stopped and must not start at the
  # next boot (it listens on every address).
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl > /dev/null; then
    systemctl disable --now prometheus.service > /dev/null 2>&1 || true
  fi
fi

# The project virtualenv: the newest ansible-core (requirements.txt) on Python 3.13 (tools/ansible_versions.sh; this
# machine kind has it under pyenv, Debian 12 has not). Without it, outside CI, the venv runs the oldest tested
# release on Debian's Python 3.11 instead, and says so; CI (CI set, as .ci/run runs) fails: it must test what the
# README promises. Rebuilt when requirements.txt or the choice changes.
# shellcheck source=tools/ansible_versions.sh
. tools/ansible_versions.sh
VENV=.venv
python=$(find_python "$VENV_PYTHON")
core_pin=
if [ -z "$python" ]; then
  fallback=${OLDER_RELEASES%% *}
  if [ -n "${CI:-}" ] || [ -z "$(find_python "${fallback##*:}")" ]; then
    echo "setup: no Python $VENV_PYTHON on this machine (on PATH as python$VENV_PYTHON or under" \
         "${PYENV_ROOT:-$HOME/.pyenv}/versions): install it (e.g. with pyenv) for ansible-core" \
         "$(grep '^ansible-core==' requirements.txt | cut -d= -f3)" >&2
    exit 1
  fi
  python=$(find_python "${fallback##*:}") core_pin="ansible-core==${fallback%%:*}"
  echo "setup: no Python $VENV_PYTHON here: $VENV runs $core_pin on $("$python" --version) (CI runs everything on" \
       "$(grep '^ansible-core==' requirements.txt))" >&2
fi
stamp="$VENV/.requirements.sha256"
want="$(sha256sum requirements.txt | cut -d' ' -f1) $python $core_pin"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating $VENV from requirements.txt on $("$python" --version)${core_pin:+ with $core_pin}"
  rm -rf "$VENV"
  "$python" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  if [ -n "$core_pin" ]; then
    "$VENV/bin/pip" install -q -r <(sed "s/^ansible-core==.*/$core_pin/" requirements.txt)
  else
    "$VENV/bin/pip" install -q -r requirements.txt
  fi
  echo "$want" > "$stamp"
fi

# uv, the resolver of the open_webui role (the role's own pinned version), in a virtualenv of its own: the integration
# test of a wheel set resolved for an older host's Python uses it (the role installs the same release for users).
uv_version=$(sed -n 's/^open_webui_uv_version: *//p' roles/open_webui/defaults/main.yml)
UV_VENV=.cache/uv-$uv_version
if [ ! -x "$UV_VENV/bin/uv" ]; then
  echo "setup: installing uv $uv_version into $UV_VENV"
  rm -rf "$UV_VENV"
  mkdir -p .cache
  /usr/bin/python3 -m venv "$UV_VENV"
  "$UV_VENV/bin/pip" install -q "uv==$uv_version"
fi

# Every lab host is a systemd that takes inotify instances from the controller's one per-user pool: the kernel's
# default of 128 runs out with a few labs up ("Too many open files" at boot).
if [ "$(cat /proc/sys/fs/inotify/max_user_instances)" -lt 1024 ]; then
  sysctl -q -w fs.inotify.max_user_instances=1024
fi
