#!/usr/bin/env bash
# ansible-test sanity needs the collection at .../ansible_collections/kimi/deploy: run it on a copy laid out so.
# ansible-test's --venv mode bootstraps pip from a download site this network cannot reach, so the sanity
# requirements (pinned by ansible-test: pylint, voluptuous, ...) go into a virtualenv of their own, from PyPI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/build/sanity/ansible_collections/kimi/deploy
venv=$root/.cache/sanity-venv
core=$(grep -E '^ansible-core==' "$root/requirements-demo.txt")
if [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$core" ]; then
  rm -rf "$venv"
  "$root/.venv/bin/python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "$core"
  echo "$core" > "$venv/.stamp"
fi
rm -rf "$dest" && mkdir -p "$dest"
# Only files the collection ships or tracks: what git tracks or would track (no venv, caches, build output).
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -C "$dest" -xf -
# ansible-test's per-test virtualenvs bootstrap pip from a download; give it the offline stand-in instead.
pip_version=$(grep -oP "pip='\K[0-9.]+" "$venv"/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py)
mkdir -p ~/.ansible/test/cache
cp "$root/tests/offline_get_pip.py" ~/.ansible/test/cache/get_pip_${pip_version//./_}.py
cd "$dest"
git init -q . && git add -A  # ansible-test lists files through git when there is a repository
export PATH=$venv/bin:$PATH
exec "$venv/bin/ansible-test" sanity --local --requirements --python 3.12 --color no "$@"
