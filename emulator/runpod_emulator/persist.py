"""Crash-safe files: atomic JSON writes and the lock that keeps one emulator per state directory."""

from __future__ import annotations

import fcntl
import json
import math
import os
import threading
from pathlib import Path
from typing import Any


def atomic_write_json(path: Path, data: Any) -> None:
    """Write JSON to a temporary file, fsync it, rename it over `path`, then fsync the directory."""
    atomic_write_bytes(path, json.dumps(data, indent=1, sort_keys=True).encode())


def atomic_write_bytes(path: Path, payload: bytes, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class JsonNumberError(ValueError):
    """A number JSON's grammar allows but the emulator never takes: NaN, Infinity, an overflowing float, or
    an integer with more digits than Python converts."""


def _refuse_constant(name: str) -> Any:
    raise JsonNumberError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonNumberError(f"number {text[:40]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        raise JsonNumberError(f"an integer of {len(text)} digits is too large") from None


def loads_strict(data: str | bytes) -> Any:
    """json.loads, refusing NaN, Infinity and out-of-range numbers (JsonNumberError, a ValueError)."""
    return json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int)


def read_json_strict(path: Path, default: Any = None) -> Any:
    """A stored JSON file; ValueError when it holds NaN, Infinity or out-of-range numbers."""
    try:
        return loads_strict(path.read_text())
    except FileNotFoundError:
        return default


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


def remove_file(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir(path.parent)


class StateDirBusy(RuntimeError):
    """Another emulator holds the state directory."""


class StateDirLock:
    """An exclusive flock on <state>/emulator.lock, held for the life of the process."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "emulator.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateDirBusy(f"state directory {self.path.parent} is in use by emulator pid {holder}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
