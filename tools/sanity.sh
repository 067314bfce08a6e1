#!/usr/bin/env bash
# ansible-test must run from inside a path ending in ansible_collections/NAMESPACE/NAME; the checkout is copied
# (tracked and untracked-but-not-ignored files only) into such a path under .cache and tested there: the product,
# llamarpc.cluster (the top directory, without lab/), then the lab, llamarpc.lab (lab/), beside it in the same
# ansible_collections tree so that the lab's imports of the product's module_utils resolve.
# SANITY_VENV (default .venv) and SANITY_PYTHON (default: the venv's own) choose the ansible-core and Python
# (tools/ansible_matrix.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${SANITY_VENV:-$root/.venv}
python=${SANITY_PYTHON:-$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
base=$root/.cache/sanity${SANITY_VENV:+-$(basename "$venv")}/ansible_collections/llamarpc
rm -rf "$base" && mkdir -p "$base/cluster" "$base/lab"
git ls-files -co --exclude-standard -z | grep -zv '^\.collections/\|^lab/' | xargs -0 cp --parents -t "$base/cluster"
git ls-files -co --exclude-standard -z -- lab | xargs -0 cp --parents -t "$base"
# Sanity venvs bootstrap pip from a download these machines cannot reach; ensurepip's bundled wheel stands in.
"$venv/bin/python" "$root/tools/get_pip_stand_in.py"
for name in cluster lab; do
  echo "=== ansible-test sanity: llamarpc.$name"
  (cd "$base/$name" && git init -q . && git add -A >/dev/null &&
    "$venv/bin/ansible-test" sanity --python "$python" --venv --requirements "$@")
done
