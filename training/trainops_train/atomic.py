"""Small durable writes, standard library only (the hooks import this before torch): a new file written
whole and fsynced, and a small file replaced so that readers see the old or the new content, never a mix."""

from __future__ import annotations

import hashlib
import os
import secrets

from . import checkpoint_format


def open_new(path: str) -> int:
    """A descriptor of a file created here (never an existing one), for writing."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)


def write_all(fd: int, view: memoryview) -> None:
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_bytes(path: str, data: bytes) -> str:
    """Write small bytes to a new file, fsynced; returns their sha256."""
    fd = open_new(path)
    try:
        write_all(fd, memoryview(data))
        os.fsync(fd)
    finally:
        os.close(fd)
    return hashlib.sha256(data).hexdigest()


def temp_name(name: str) -> str:
    """A name beside `name` for writing it before the rename (pid and random hex keep writers apart)."""
    return f"{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"


def replace_bytes_atomically(path: str, data: bytes) -> str:
    """Replace a small file (fsynced, renamed into place, the directory fsynced); returns its sha256."""
    temp = temp_name(path)
    try:
        digest = write_bytes(temp, data)
        os.replace(temp, path)
    except BaseException:
        if os.path.lexists(temp):
            os.unlink(temp)
        raise
    checkpoint_format.fsync_dir(os.path.dirname(os.path.abspath(path)))
    return digest


def replace_text_atomically(path: str, text: str) -> None:
    """Replace a small file so readers see the old or the new content, never a mix."""
    replace_bytes_atomically(path, text.encode("utf-8"))
