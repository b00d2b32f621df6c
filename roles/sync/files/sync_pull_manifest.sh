#!/bin/sh
# Runs on the pod (ansible.builtin.script, from roles/sync/tasks/pull_steps.yml): lists what a pull takes
# from a run directory and hashes it, at pull time.
#
#   sync_pull_manifest.sh RUN_DIR [--ckpt NAME]... [--] PATH...
#
# Writes, in RUN_DIR, pull.sha256 (sha256sum of every regular file under the PATHs, coreutils format,
# sorted by bytes) and pull.files (pull.sha256, those files, then every regular file of each ckpt/NAME, for
# `rsync --files-from`; a sealed checkpoint file comes with its seal beside it, NAME.SHA256SUMS and
# NAME.trainops-seal.json, where they are). Each is replaced only when its content changed, so an unchanged run directory is
# left as it was. Prints one JSON line: {"state": "new"|"same", "files": N, "bytes": N (the hashed files),
# "ckpt_files": N, "ckpt_bytes": N (the checkpoints' files), "missing": [PATHs not on the pod]}.
# Exits 4 when a named checkpoint is missing (or a symbolic link).
set -eu
export LC_ALL=C

run=$1
shift
cd "$run"

tmp=$(mktemp -d .sync-pull.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# checkpoint names one per line, never split on spaces nor globbed
: > "$tmp/names"
while [ $# -gt 0 ]; do
    case $1 in
    --ckpt) printf '%s\n' "$2" >> "$tmp/names"; shift 2 ;;
    --) shift; break ;;
    *) break ;;
    esac
done

missing=""
: > "$tmp/list"
for path in "$@"; do
    if [ -e "$path" ]; then
        find "$path" -type f -print >> "$tmp/list"
    else
        missing="$missing${missing:+,}\"$path\""
    fi
done
sort -u -o "$tmp/list" "$tmp/list"

: > "$tmp/ckpt"
while IFS= read -r name; do
    if [ -L "ckpt/$name" ] || { [ ! -d "ckpt/$name" ] && [ ! -f "ckpt/$name" ]; }; then
        echo "no checkpoint directory or file ckpt/$name in $run" >&2
        exit 4
    fi
    if [ -f "ckpt/$name" ]; then
        for file in "ckpt/$name" "ckpt/$name.SHA256SUMS" "ckpt/$name.trainops-seal.json"; do
            if [ -f "$file" ] && [ ! -L "$file" ]; then
                echo "$file"
            fi
        done >> "$tmp/ckpt"
    else
        find "ckpt/$name" -type f -print | sort >> "$tmp/ckpt"
    fi
done < "$tmp/names"

tr '\n' '\0' < "$tmp/list" | xargs -0 -r sha256sum -- > "$tmp/sha256"
files=$(wc -l < "$tmp/list")
bytes=$(tr '\n' '\0' < "$tmp/list" | xargs -0 -r stat -c %s -- | awk '{ s += $1 } END { printf "%d", s }')
ckpt_files=$(wc -l < "$tmp/ckpt")
ckpt_bytes=$(tr '\n' '\0' < "$tmp/ckpt" | xargs -0 -r stat -c %s -- | awk '{ s += $1 } END { printf "%d", s }')
{ echo pull.sha256; cat "$tmp/list" "$tmp/ckpt"; } > "$tmp/files"

state=same
for name in sha256 files; do
    if ! cmp -s "$tmp/$name" "pull.$name"; then
        chmod 0644 "$tmp/$name"
        mv "$tmp/$name" "pull.$name"
        state=new
    fi
done
printf '{"state": "%s", "files": %d, "bytes": %d, "ckpt_files": %d, "ckpt_bytes": %d, "missing": [%s]}\n' \
    "$state" "$files" "$bytes" "$ckpt_files" "$ckpt_bytes" "$missing"
