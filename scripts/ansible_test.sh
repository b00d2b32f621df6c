#!/usr/bin/env bash
# Run ansible-test from the collection's path (.../ansible_collections/trainops/gpu).
# ansible-test resolves the physical working directory, so a symlink to this checkout is not
# enough: copy what a commit would hold (tracked and new, unignored files; a few MiB) into
# .cache/ansible-test.XXXX/ansible_collections/trainops/gpu (one per run, so runs may overlap)
# and run there. Results come back to tests/output/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.cache"
top=$(mktemp -d "$root/.cache/ansible-test.XXXXXX")
trap 'rm -rf "$top"' EXIT
build="$top/ansible_collections/trainops/gpu"
mkdir -p "$build"
cd "$root"
git ls-files -co --exclude-standard -z | rsync -a --ignore-missing-args --from0 --files-from=- ./ "$build/"
cd "$build"
# ansible-test lists a collection's files through git; a throwaway index is enough.
git init -q . && git add -A
rc=0
ANSIBLE_COLLECTIONS_PATH="$top:$root/collections" ansible-test "$@" || rc=$?
if [ -d tests/output ]; then
    mkdir -p "$root/tests/output"
    rsync -a tests/output/ "$root/tests/output/"
fi
exit $rc
