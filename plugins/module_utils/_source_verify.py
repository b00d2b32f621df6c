# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the pod (Python >= 3.8, standard library only, no import of the collection): the sync_push action
# sends this file's text as ``python3 -c`` over its SSH connection. It keeps Python 3.8 idioms.
# ruff: noqa: UP004, UP009, UP031, RUF100
"""Check a pushed source tree on the pod against the controller's manifest (coreutils ``sha256sum`` format).

``python3 -c <this file> RUN_DIR SUBDIR MANIFEST_SHA256 MODE`` reads on standard input a line with the
manifest's length, the manifest, then a line ``go`` once the transfer is done (it starts while rsync runs, so
that its start-up is not waited for; anything but ``go`` ends it unchecked). It checks that the manifest's
bytes hash to MANIFEST_SHA256 (nothing was lost on the way), keeps it as ``RUN_DIR/source.sha256``
(written atomically, only when its content changed) and checks every listed file under ``RUN_DIR/SUBDIR``:
a regular file (not a link, not missing) whose sha256 is the listed one. It prints one JSON object:
``checked``, ``hashed`` (files read this time), ``bytes_hashed``, ``bad`` (``"path: reason"``, sorted),
``manifest_written``.

MODE ``cached`` reads only the files whose identity changed since the last check: the hashes of files that
matched are kept in ``RUN_DIR/.source.verify.json`` keyed by (size, mtime_ns, ctime_ns, inode, device).
A write changes the ctime, which no user call can set back (utime sets mtime only), so a file edited on the
pod since, even with its size and mtime restored, is read again. Entries whose mtime or ctime lie within
a clock tick of the moment they were hashed are not kept (``racy``): a write in the same tick would not show
(git's "racy clean" rule). MODE ``full`` reads every file and rewrites the cache.
"""

from __future__ import absolute_import, division, print_function

import hashlib
import json
import os
import stat
import sys
import tempfile
import time
import contextlib

MANIFEST_NAME = "source.sha256"
CACHE_NAME = ".source.verify.json"
CACHE_VERSION = 1
# A file changed within a clock tick of its hashing could change again with the same timestamps. Timestamps
# with a sub-second part come from a filesystem with a fine clock (a tick of a few ms): 0.1 s is enough.
# Whole seconds may mean a one- or two-second clock (FAT, some network filesystems): 2 s then.
RACY_FINE_NS = 100 * 1000 * 1000
RACY_COARSE_NS = 2 * 1000 * 1000 * 1000
CHUNK = 1024 * 1024
MODES = ("cached", "full")


class VerifyError(Exception):
    """The check could not be made (bad arguments, manifest damaged on the way, unreadable run directory)."""


def _unescape(name):
    # coreutils writes a name holding a backslash or a line break escaped, on a line starting with "\".
    out = []
    index = 0
    while index < len(name):
        char = name[index]
        if char == "\\" and index + 1 < len(name):
            nxt = name[index + 1]
            out.append({"\\": "\\", "n": "\n", "r": "\r"}.get(nxt, "\\" + nxt))
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def parse_manifest(text):
    # type: (str) -> list
    """[(path, sha256)] of a coreutils sha256sum file (text mode, two spaces); ValueError on a bad line."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        escaped = line.startswith("\\")
        if escaped:
            line = line[1:]
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError("line %d of the manifest is not '<sha256>  <path>': %r" % (number, line[:120]))
        name = _unescape(name) if escaped else name
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError("line %d of the manifest names a path outside the tree: %r" % (number, name[:120]))
        entries.append((name, digest))
    return entries


def identity(st):
    # type: (os.stat_result) -> list
    """What a cached hash is keyed by: size, mtime_ns, ctime_ns, inode, device."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def racy(ident, now_ns):
    # type: (list, int) -> bool
    """True when a hash read at ``now_ns`` must not be cached for ``ident``: its mtime or ctime lies within a
    clock tick of now, so a later write could keep them."""
    newest = max(ident[1], ident[2])
    coarse = ident[1] % 1000000000 == 0 and ident[2] % 1000000000 == 0
    return newest >= now_ns - (RACY_COARSE_NS if coarse else RACY_FINE_NS)


def _hash_file(path):
    """(sha256, identity, bytes read) of a regular file, opened without following a link; None when it is not
    a regular file. Raises OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        digest = hashlib.sha256()
        size = 0
        chunk = handle.read(CHUNK)
        while chunk:
            digest.update(chunk)
            size += len(chunk)
            chunk = handle.read(CHUNK)
        # The identity after the read: a write during it changed the ctime, so the entry is not trusted later.
        return digest.hexdigest(), identity(os.fstat(handle.fileno())), size


def load_cache(path):
    # type: (str) -> dict
    """{path: [size, mtime_ns, ctime_ns, ino, dev, sha256]}; empty when missing, unreadable or of another
    version (a damaged cache only costs a full read). The same format serves the controller's hash cache
    (_provenance.HashCache)."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("files"), dict):
        return {}
    return data["files"]


def cached_sha(entry, st):
    # type: (object, os.stat_result) -> object
    """The sha256 a cache entry holds when ``st`` is still the identity it was read with; else None."""
    if isinstance(entry, list) and len(entry) == 6 and entry[:5] == identity(st):
        return entry[5]
    return None


def _atomic_write(path, data):
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def same_bytes(path, data):
    # type: (str, bytes) -> bool
    """True when the file at ``path`` holds exactly ``data`` (False when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return handle.read() == data
    except (IOError, OSError):
        return False


def _check_one(root, name, digest, cached, now_ns):
    """(reason or None, cache entry or None, bytes read or None when the file was not read). ``now_ns`` (the
    moment of the read, for the racy rule) defaults to the clock after the read."""
    path = os.path.join(root, name)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing", None, None
    except OSError as exc:
        return "cannot stat: %s" % (exc.strerror or exc), None, None
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file", None, None
    if cached_sha(cached, st) == digest:
        return None, cached, None
    try:
        found = _hash_file(path)
    except OSError as exc:
        return "cannot read: %s" % (exc.strerror or exc), None, None
    if found is None:
        return "not a regular file", None, None
    sha, ident, size = found
    if sha != digest:
        return "sha256 differs from the manifest", None, size
    now_ns = time.time_ns() if now_ns is None else now_ns
    return None, (None if racy(ident, now_ns) else [*ident, sha]), size


class Request(object):
    """A checked manifest and the cache, loaded: everything that can be done before the transfer ends (the run
    directory may not exist yet)."""

    def __init__(self, run_dir, subdir, manifest_bytes, manifest_sha256, mode="cached"):
        if mode not in MODES:
            raise VerifyError("mode must be one of %s, got %r" % (", ".join(MODES), mode))
        if hashlib.sha256(manifest_bytes).hexdigest() != manifest_sha256:
            raise VerifyError("the manifest received does not hash to %s: it was damaged on the way" % manifest_sha256)
        try:
            self.entries = parse_manifest(manifest_bytes.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise VerifyError("bad manifest: %s" % exc) from exc
        self.manifest = manifest_bytes
        self.manifest_path = os.path.join(run_dir, MANIFEST_NAME)
        self.root = os.path.join(run_dir, subdir)
        self.cache_path = os.path.join(run_dir, CACHE_NAME)
        self.cache = load_cache(self.cache_path) if mode == "cached" else {}

    def check(self, now_ns=None):
        # type: (object) -> dict
        """Keep the manifest, check every listed file now, save the hashes that may be trusted next time."""
        if not os.path.isdir(self.root):
            raise VerifyError("%s is not a directory on the pod" % self.root)
        manifest_written = not same_bytes(self.manifest_path, self.manifest)
        if manifest_written:
            _atomic_write(self.manifest_path, self.manifest)
        bad = []
        kept = {}
        hashed = 0
        bytes_hashed = 0
        for name, digest in self.entries:
            reason, entry, size = _check_one(self.root, name, digest, self.cache.get(name), now_ns)
            if size is not None:
                hashed += 1
                bytes_hashed += size
            if reason:
                bad.append("%s: %s" % (name, reason))
            elif entry is not None:
                kept[name] = entry
        if kept != self.cache:
            data = json.dumps({"version": CACHE_VERSION, "files": kept}, sort_keys=True).encode("utf-8")
            _atomic_write(self.cache_path, data)
        return {
            "checked": len(self.entries),
            "hashed": hashed,
            "bytes_hashed": bytes_hashed,
            "bad": sorted(bad),
            "manifest_written": manifest_written,
        }


def verify(run_dir, subdir, manifest_bytes, manifest_sha256, mode="cached", now_ns=None):
    # type: (str, str, bytes, str, str, object) -> dict
    """Keep the manifest in ``run_dir`` and check ``run_dir/subdir`` against it (see the module docstring)."""
    return Request(run_dir, subdir, manifest_bytes, manifest_sha256, mode).check(now_ns)


def read_request(stream):
    # type: (object) -> bytes
    """The manifest from ``stream``: a line with its length in bytes, then the bytes."""
    header = stream.readline().strip()
    if not header.isdigit():
        raise VerifyError("expected the manifest's length on the first line, got %r" % header[:40])
    size = int(header)
    data = stream.read(size)
    if len(data) != size:
        raise VerifyError("the manifest was cut short: %d of %d bytes" % (len(data), size))
    return data


def main(argv=None):
    """Read the manifest, then wait for ``go`` (the transfer is done) or anything else (it failed: stop)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 4:
        sys.stderr.write("usage: RUN_DIR SUBDIR MANIFEST_SHA256 MODE; standard input: LENGTH, manifest, go\n")
        return 2
    run_dir, subdir, manifest_sha256, mode = argv
    stream = sys.stdin.buffer
    try:
        request = Request(run_dir, subdir, read_request(stream), manifest_sha256, mode)
        if stream.readline().strip() != b"go":
            sys.stdout.write(json.dumps({"skipped": True}) + "\n")
            return 0
        result = request.check()
    except (VerifyError, IOError, OSError) as exc:
        sys.stdout.write(json.dumps({"error": str(exc)}) + "\n")
        return 1
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
