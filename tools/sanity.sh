#!/usr/bin/env bash
# ansible-test must run from inside a path ending in ansible_collections/NAMESPACE/NAME; the checkout is copied
# (tracked and untracked-but-not-ignored files only) into such a path under .cache and tested there.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dest=$root/.cache/sanity/ansible_collections/llamarpc/cluster
rm -rf "$dest" && mkdir -p "$dest"
git ls-files -co --exclude-standard -z | grep -zv '^\.collections/' | xargs -0 cp --parents -t "$dest"
# Sanity venvs bootstrap pip from a download these machines cannot reach; ensurepip's bundled wheel stands in.
"$root/.venv/bin/python" "$root/tools/get_pip_stand_in.py"
cd "$dest"
git init -q . && git add -A >/dev/null
"$root/.venv/bin/ansible-test" sanity --python 3.11 --venv --requirements "$@"
