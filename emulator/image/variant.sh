#!/usr/bin/env bash
# Build a variant of the local pod image: `variant.sh NAME` runs variants/NAME.sh as root inside a container
# of the base image (localhost/trainops-pod:<tag.sh>, `make image`) with no network, and commits it as
# localhost/trainops-pod-NAME:<tag>. The tag hashes the base image's tag, this script and variants/NAME.sh, so
# the variant is reused while they are unchanged (old tags of it are removed). `variant.sh NAME --tag` only
# prints the tag. Pods ask for a variant by their image name (docs/emulator.md, runpod_emulator.backends.podman).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
name=${1:?usage: variant.sh NAME [--tag]}
recipe="$here/variants/$name.sh"
if [ ! -f "$recipe" ]; then
    echo "variant.sh: no variant $name (no $recipe)" >&2
    exit 2
fi
base="localhost/trainops-pod:$("$here/tag.sh")"
tag=$({ echo "$base"; cat "$here/variant.sh" "$recipe"; } | sha256sum | cut -c1-12)
if [ "${2:-}" = "--tag" ]; then
    echo "$tag"
    exit 0
fi
repository="localhost/trainops-pod-$name"
image="$repository:$tag"

if podman image exists "$image"; then
    echo "image: $image (reused)"
    exit 0
fi
if ! podman image exists "$base"; then
    echo "variant.sh: the base image $base is not built: run \`make image\` first" >&2
    exit 1
fi
start=$(date +%s)
builder="trainops-variant-$name-$$"
trap 'podman rm -f -t 0 "$builder" >/dev/null 2>&1 || true' EXIT
if ! podman run --name "$builder" --network none -i "$base" bash -s < "$recipe" > "${TMPDIR:-/tmp}/$builder.log" 2>&1; then
    cat "${TMPDIR:-/tmp}/$builder.log" >&2
    rm -f "${TMPDIR:-/tmp}/$builder.log"
    exit 1
fi
rm -f "${TMPDIR:-/tmp}/$builder.log"
podman commit -q --change 'CMD ["/start.sh"]' "$builder" "$image" >/dev/null
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' --filter "reference=$repository"); do
    if [ "$old" != "$image" ] && podman rmi "$old" >/dev/null 2>&1; then echo "image: removed old $old"; fi
done
echo "image: $image built in $(( $(date +%s) - start )) s"
