#!/usr/bin/env bash
# Set-up of `make test-webui` only (on top of tools/setup.sh): Debian's chromium for the browser test and a separate
# virtualenv with Playwright (requirements-webui.txt). The shared .venv is not touched. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "ok installed"; then
  echo "setup: installing chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi

VENV=.cache/webui-tools
stamp="$VENV/.requirements.sha256"
want=$(sha256sum requirements-webui.txt | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating $VENV from requirements-webui.txt"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r requirements-webui.txt
  echo "$want" > "$stamp"
fi
