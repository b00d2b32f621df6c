# Copyright: trainops.gpu contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pack the training package (trainops_train: the hooks a user's trainer imports) for the pod, on the controller.

    pack_training.py PACKAGE_DIR OUT_DIR

Writes OUT_DIR/trainops_train-<key>.tar, where key is the first 16 hex digits of a sha256 over the sources' names
and bytes. The same sources always give the same archive (sorted names, fixed mtime, owner and mode, no
__pycache__), so the name says what is inside and a pod can keep one directory per key. The last member,
<key>/COMPLETE, tells a finished extraction from one that was cut short. Prints {"path", "key", "files"} as JSON.
"""

import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile

MTIME = 1700000000  # fixed: the archive's bytes depend on the sources only


def _member(name, data, mode=0o644):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = MTIME
    info.mode = mode
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info, io.BytesIO(data)


def pack(package_dir):
    """(key, tar bytes, the sources' names): the key is over the sources' names and bytes."""
    names = sorted(name for name in os.listdir(package_dir) if name.endswith(".py"))
    if "__init__.py" not in names:
        raise SystemExit(f"pack_training.py: {package_dir} is not a Python package (no __init__.py)")
    sources = []
    for name in names:
        with open(os.path.join(package_dir, name), "rb") as handle:
            sources.append((name, handle.read()))
    digest = hashlib.sha256()
    for name, data in sources:
        digest.update(f"{name}\0{len(data)}\0".encode() + data)
    key = digest.hexdigest()[:16]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name, data in sources:
            archive.addfile(*_member(f"{key}/trainops_train/{name}", data))
        archive.addfile(*_member(f"{key}/COMPLETE", f"{key}\n".encode()))
    return key, buffer.getvalue(), [name for name, _data in sources]


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: pack_training.py PACKAGE_DIR OUT_DIR")
    package_dir, out_dir = sys.argv[1], sys.argv[2]
    key, data, names = pack(package_dir)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"trainops_train-{key}.tar")
    if not os.path.exists(path):
        fd, temp = tempfile.mkstemp(dir=out_dir, prefix=".pack-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temp, 0o644)
        os.replace(temp, path)  # same key, same bytes: a concurrent packer's rename is harmless
    sys.stdout.write(json.dumps({"path": path, "key": key, "files": names}) + "\n")


if __name__ == "__main__":
    main()
