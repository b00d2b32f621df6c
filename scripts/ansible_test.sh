#!/usr/bin/env bash
# Run ansible-test from the collection's path (.../ansible_collections/trainops/gpu).
# ansible-test resolves the physical working directory, so a symlink to this checkout is not
# enough: copy what a commit would hold (tracked and new, unignored files; a few MiB) into
# .cache/ansible_collections/trainops/gpu and run there. Results come back to tests/output/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/.cache/ansible_collections/trainops/gpu"
rm -rf "$build"
mkdir -p "$build"
cd "$root"
git ls-files -co --exclude-standard -z | rsync -a --from0 --files-from=- ./ "$build/"
cd "$build"
# ansible-test lists a collection's files through git; a throwaway index is enough.
git init -q . && git add -A
rc=0
ANSIBLE_COLLECTIONS_PATH="$root/.cache:$root/collections" ansible-test "$@" || rc=$?
if [ -d tests/output ]; then
    mkdir -p "$root/tests/output"
    rsync -a tests/output/ "$root/tests/output/"
fi
exit $rc
