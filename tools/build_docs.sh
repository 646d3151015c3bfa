#!/usr/bin/env bash
# make docs: the collection's documentation site, with antsibull-docs, into build/docs (HTML).
#
# antsibull-docs sphinx-init lays out a Sphinx project for kimi.deploy in build/docs-src (generated each time, never
# committed), `antsibull-docs collection` writes a page per module, filter and role (from DOCUMENTATION and
# meta/argument_specs.yml), and Sphinx builds it with warnings as errors (-W): a broken reference fails the build.
# Offline: the links into Ansible's own documentation resolve through inventories that tools/docs_inventory.py
# writes (the few labels the pages name), not through docs.ansible.com.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=${KIMI_DOCS_VENV:-$root/.venv-docs}
src=${KIMI_DOCS_SRC:-$root/build/docs-src} out=${KIMI_DOCS_OUT:-$root/build/docs}
export PATH=$venv/bin:$PATH ANSIBLE_COLLECTIONS_PATH=$root/.collections
rm -rf "$src" "$out"
mkdir -p "$src" && chmod 700 "$src"  # antsibull-docs wants its folders writable by their owner only
antsibull-docs sphinx-init --use-current --dest-dir "$src" kimi.deploy >/dev/null
"$venv/bin/python" tools/docs_inventory.py "$src"
# Only the local inventories (no network); the rest of conf.py is antsibull-docs' own.
cat >>"$src/conf.py" <<'PY'

# kimi.deploy: offline inventories for the labels the pages link to (tools/docs_inventory.py).
import os  # noqa: E402
intersphinx_mapping = {
    'ansible_devel': ('https://docs.ansible.com/projects/ansible/devel/',
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ansible_devel.inv')),
}
PY
mkdir -p "$src/rst" && chmod og-w "$src/rst"
# A plugin or role whose documentation does not validate gets an error page and an ERROR line: fail on it.
(cd "$src" && antsibull-docs --config-file antsibull-docs.cfg collection --cleanup everything --use-current \
  --dest-dir rst kimi.deploy) >"$src/antsibull-docs.log" 2>&1 || { cat "$src/antsibull-docs.log"; exit 1; }
if grep -E '^(ERROR|WARNING)|did not return correct DOCUMENTATION' "$src/antsibull-docs.log"; then
  echo "docs: antsibull-docs reported the problems above" >&2
  exit 1
fi
# The guides (docs/docsite): antsibull-docs' own lint (rstcheck, and each :ansplugin: reference names a real plugin or
# role; Sphinx -W below checks the :ref: labels). ansible-doc needs the dependencies: community.docker, from the
# ansible package of make setup's virtualenv.
deps=$("$root/.venv/bin/python" -c 'import ansible_collections, os; print(os.path.dirname(list(ansible_collections.__path__)[0]))' \
  2>/dev/null || true)
ANSIBLE_COLLECTIONS_PATH=$ANSIBLE_COLLECTIONS_PATH${deps:+:$deps} \
  antsibull-docs lint-collection-docs --no-plugin-docs --check-extra-docs-refs "$root"
sphinx-build -q -W --keep-going -b html -c "$src" "$src/rst" "$out"
echo "docs: $out/index.html"
