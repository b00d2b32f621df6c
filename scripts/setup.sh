#!/usr/bin/env bash
# One-command setup of a fresh Debian/Ubuntu machine for trainops.gpu, idempotent.
# Each step says what it does and how long it took; a second run changes nothing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${TRAINOPS_CACHE:-/var/cache/trainops}
venv="$root/.venv"
collections="$root/collections/ansible_collections"
# The `ansible` wheel carries ansible.posix and containers.podman; Galaxy is unreachable here.
ansible_wheel_version=12.3.0
apt_packages=(podman catatonit runc conmon slirp4netns uidmap debootstrap rsync openssh-client shellcheck tmux make git ca-certificates python3-venv)

step() {
    local name=$1; shift
    local t0=$EPOCHREALTIME
    echo "setup: $name ..."
    "$@"
    awk -v n="$name" -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "setup: %s: %.1f s\n", n, b - a }'
}

apt_step() {
    local missing=()
    for p in "${apt_packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        echo "  all ${#apt_packages[@]} apt packages present"
        return
    fi
    echo "  installing: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

venv_step() {
    local want have=""
    want=$(sha256sum < requirements.txt | cut -c1-16)
    [ -f "$venv/.requirements" ] && have=$(cat "$venv/.requirements")
    if [ -x "$venv/bin/python" ] && [ "$want" = "$have" ]; then
        echo "  .venv matches requirements.txt"
        return
    fi
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    echo "  installing requirements.txt into .venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r requirements.txt 2>&1 | grep -v '^WARNING: Location' || true
    "$venv/bin/python" -c 'import ansible, torch, molecule, openapi_core, matplotlib' || { echo "setup: venv install failed" >&2; exit 1; }
    echo "$want" > "$venv/.requirements"
}

packages_step() {
    # This checkout's Python packages, editable: tests, benchmarks and make targets import them from .venv.
    local want have="" packages=(emulator training)
    want=$(for p in "${packages[@]}"; do cat "$p/pyproject.toml"; [ ! -f "$p/setup.py" ] || cat "$p/setup.py"; done \
        | cat galaxy.yml - | sha256sum | cut -c1-16)
    [ -f "$venv/.packages" ] && have=$(cat "$venv/.packages")
    if [ "$want" = "$have" ]; then
        echo "  ${packages[*]} installed editable"
        return
    fi
    local args=()
    for p in "${packages[@]}"; do args+=(-e "$root/$p"); done
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation "${args[@]}" 2>&1 \
        | { grep -v '^WARNING: Location' || true; }
    "$venv/bin/python" -c 'import runpod_emulator, trainops_train' || { echo "setup: editable install failed" >&2; exit 1; }
    echo "$want" > "$venv/.packages"
    echo "  installed editable: ${packages[*]}"
}

collections_step() {
    local stamp="$collections/.from-ansible-$ansible_wheel_version"
    if [ -f "$stamp" ]; then
        echo "  ansible.posix and containers.podman present (ansible $ansible_wheel_version wheel)"
    else
        mkdir -p "$cache/wheels" "$collections"
        local whl
        whl=$(ls "$cache"/wheels/ansible-"$ansible_wheel_version"-py3-none-any.whl 2>/dev/null || true)
        if [ -z "$whl" ]; then
            "$venv/bin/pip" download -q --no-deps -d "$cache/wheels" "ansible==$ansible_wheel_version" 2>&1 | grep -v '^WARNING: Location' || true
            whl="$cache/wheels/ansible-$ansible_wheel_version-py3-none-any.whl"
        fi
        rm -rf "$collections/ansible/posix" "$collections/containers/podman"
        "$venv/bin/python" - "$whl" "$collections" <<'PY'
import sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
wanted = ("ansible_collections/ansible/posix/", "ansible_collections/containers/podman/")
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith(wanted)]
    for n in names:
        z.extract(n, dest + "/..")
print("  unpacked %d files" % len(names))
PY
        touch "$stamp"
    fi
    # This checkout, reachable as trainops.gpu by ansible and ansible-test.
    mkdir -p "$collections/trainops"
    local link="$collections/trainops/gpu"
    if [ "$(readlink "$link" 2>/dev/null)" != "$root" ]; then
        rm -rf "$link"
        ln -s "$root" "$link"
        echo "  linked $link -> $root"
    fi
}

sanity_step() {
    # ansible-test fetches a pip bootstrap script from a host we cannot reach. Give it a
    # stand-in in its cache that installs the matching pip wheel from PyPI.
    "$venv/bin/python" "$root/scripts/ansible_test_bootstrap.py" "$cache/wheels"
}

example_wheels_step() {
    # The examples' requirements as wheels for the pods (they install from a directory, no index): one
    # directory per example with a requirements.txt, refreshed when that file changes. The pod image's Python and
    # platform (emulator/image/build.sh), whatever this machine's are.
    local req name dir want
    # (pip does not widen an explicit --platform to the older manylinux tags a glibc 2.36 pod accepts: each is named)
    local target=(--python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none --platform any)
    local tag
    for tag in manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_12 manylinux2010; do
        target+=(--platform "${tag}_x86_64")
    done
    for req in "$root"/training/examples/*/requirements.txt; do
        [ -f "$req" ] || continue
        name=$(basename "$(dirname "$req")")
        dir="$root/.cache/wheels/$name"
        want=$( (cat "$req"; echo "${target[*]}") | sha256sum | cut -c1-16)
        if [ "$(cat "$dir/.requirements" 2>/dev/null)" = "$want" ]; then
            echo "  $name: wheels match its requirements.txt"
            continue
        fi
        rm -rf "$dir"
        mkdir -p "$dir"
        "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: "${target[@]}" \
            -d "$dir" -r "$req" 2>&1 \
            | grep -v '^WARNING: Location' || true
        [ "$(find "$dir" -name '*.whl' | wc -l)" -eq "$(grep -cE '^[A-Za-z0-9]' "$req")" ] \
            || { echo "setup: $name: not every wheel of $req was downloaded" >&2; exit 1; }
        echo "$want" > "$dir/.requirements"
        echo "  $name: $(find "$dir" -name '*.whl' | wc -l) wheels in .cache/wheels/$name"
    done
}

step "apt packages" apt_step
step "python venv (.venv)" venv_step
step "python packages (editable)" packages_step
step "ansible collections" collections_step
step "ansible-test offline pip bootstrap" sanity_step
step "example wheels (.cache/wheels)" example_wheels_step
echo "setup: ok"
