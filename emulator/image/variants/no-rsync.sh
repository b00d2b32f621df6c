#!/usr/bin/env bash
# Variant no-rsync of the local pod image (emulator/image/variant.sh runs this inside a container of the base
# image, without network): as RunPod's own images (runpod/pytorch) are, it has openssh-server but no rsync.
# rsync's .deb stays in a local file-based apt repository, /opt/trainops-apt, the only apt source left, so
# `apt-get update && apt-get install rsync` works offline; removing /opt/trainops-apt leaves apt nothing to
# install from.
set -euo pipefail

repo=/opt/trainops-apt
work=$(mktemp -d)
mkdir -p "$repo"

# Rebuild rsync's .deb from the installed package (what dpkg-repack does): its files, control fields,
# conffiles and maintainer scripts.
version=$(dpkg-query -W -f '${Version}' rsync)
arch=$(dpkg-query -W -f '${Architecture}' rsync)
pkg="$work/rsync"
mkdir -p "$pkg/DEBIAN"
# Directories as real directories (under usrmerge /lib is a link to usr/lib: the package's paths keep /lib);
# the files the base image's build removed (docs, man pages) are left out.
dpkg-query -L rsync | grep '^/' | while IFS= read -r path; do
    if [ -d "$path" ] && [ ! -L "$path" ]; then
        mkdir -p "$pkg$path"
    elif [ ! -d "$path" ] && { [ -e "$path" ] || [ -L "$path" ]; }; then
        printf '%s\n' "$path"
    fi
done > "$work/files"
tar -cf - -T "$work/files" | tar -C "$pkg" -xf -
dpkg-query -s rsync | grep -v '^Status:' | sed '/^Conffiles:/,/^[^ ]/{/^Conffiles:/d;/^ /d}' > "$pkg/DEBIAN/control"
info=/var/lib/dpkg/info
for part in conffiles preinst postinst prerm postrm md5sums triggers; do
    if [ -f "$info/rsync.$part" ]; then
        cp -a "$info/rsync.$part" "$pkg/DEBIAN/$part"
    fi
done
deb="rsync_${version}_${arch}.deb"
dpkg-deb -Zgzip --root-owner-group --build "$pkg" "$repo/$deb" >/dev/null

# The repository's index: the package's control fields, where it is and its hashes.
{
    dpkg-deb --field "$repo/$deb"
    echo "Filename: ./$deb"
    echo "Size: $(stat -c %s "$repo/$deb")"
    echo "MD5sum: $(md5sum "$repo/$deb" | cut -d' ' -f1)"
    echo "SHA256: $(sha256sum "$repo/$deb" | cut -d' ' -f1)"
    echo
} > "$repo/Packages"
{
    echo "Origin: trainops"
    echo "Label: trainops local pod packages"
    echo "Date: $(date -u -d @0 '+%a, %d %b %Y %H:%M:%S UTC')"
    echo "SHA256:"
    echo " $(sha256sum "$repo/Packages" | cut -d' ' -f1) $(stat -c %s "$repo/Packages") Packages"
} > "$repo/Release"
chmod -R a+rX "$repo"

# The only apt source: no network is ever needed.
rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
echo "deb [trusted=yes] file:$repo ./" > /etc/apt/sources.list.d/trainops-local.list

dpkg --remove rsync >/dev/null
rm -rf "$work" /var/lib/apt/lists/* /var/cache/apt/*.bin
if command -v rsync >/dev/null; then
    echo "no-rsync: rsync is still installed" >&2
    exit 1
fi
