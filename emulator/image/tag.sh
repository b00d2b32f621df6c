#!/usr/bin/env bash
# The image tag: a hash of every input of the build, so a change to any of them makes a new image.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
cat build.sh tag.sh start.sh packages.txt requirements-pod.txt | sha256sum | cut -c1-12
