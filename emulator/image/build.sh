#!/usr/bin/env bash
# Build the local pod image: Debian bookworm via debootstrap, torch baked in,
# `podman import`ed as localhost/trainops-pod:<hash of this folder's inputs>.
# Rebuilt only when an input changes. Prints the tag, the size and the build time.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${TRAINOPS_CACHE:-/var/cache/trainops}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm

tag=$("$here/tag.sh")
image="localhost/trainops-pod:$tag"

if podman image exists "$image"; then
    size=$(podman image inspect "$image" --format '{{.Size}}')
    echo "image: $image (reused, $((size / 1024 / 1024)) MiB)"
    exit 0
fi

start=$(date +%s)
mkdir -p "$cache/debootstrap" "$cache/pod-wheels"
work=$(mktemp -d "${TMPDIR:-/tmp}/trainops-image.XXXXXX")
rootfs="$work/rootfs"
cleanup() {
    for m in proc dev/pts dev; do umount "$rootfs/$m" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

echo "image: debootstrap $suite (cache $cache/debootstrap)"
packages=$(grep -v '^#' "$here/packages.txt" | tr '\n' ',' | sed 's/,*$//')
debootstrap --variant=minbase --include="$packages" --cache-dir="$cache/debootstrap" \
    "$suite" "$rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 || {
    tail -30 "$work/debootstrap.log"; exit 1; }

echo "image: python packages (wheel cache $cache/pod-wheels)"
python3 -m pip download -q --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
    -d "$cache/pod-wheels" -r "$here/requirements-pod.txt" 2>&1 | { grep -v '^WARNING: Location' || true; }
mkdir -p "$rootfs/tmp/wheels"
cp "$cache"/pod-wheels/*.whl "$rootfs/tmp/wheels/"
cp "$here/requirements-pod.txt" "$rootfs/tmp/wheels/"
env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin chroot "$rootfs" python3 -m pip install -q --no-index --no-cache-dir --break-system-packages \
    --root-user-action=ignore --find-links /tmp/wheels -r /tmp/wheels/requirements-pod.txt
rm -rf "$rootfs/tmp/wheels"

install -m 755 "$here/start.sh" "$rootfs/start.sh"
# sshd: keys only, root allowed (as on RunPod); no host keys baked in.
rm -f "$rootfs"/etc/ssh/ssh_host_*
cat > "$rootfs/etc/ssh/sshd_config.d/trainops.conf" <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
CONF
# Smaller image: no apt lists, docs or caches.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/root/.cache

echo "image: podman import"
tar -C "$rootfs" --numeric-owner -c . | podman import \
    --change 'CMD ["/start.sh"]' \
    --change 'WORKDIR /' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "$image" > "$work/import.log" 2>&1 || { cat "$work/import.log"; exit 1; }

size=$(podman image inspect "$image" --format '{{.Size}}')
echo "image: $image built in $(( $(date +%s) - start )) s, $((size / 1024 / 1024)) MiB"
