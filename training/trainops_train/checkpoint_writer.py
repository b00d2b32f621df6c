"""Writing checkpoints: hash while writing, atomic directory commit, keep-last-k pruning.

Names, layout, SHA256SUMS and manifest come from the shared format definition (`checkpoint_format`); this
module only adds the write path. A save:

1. writes every payload into `.tmp-step-N-<pid>-<hex>/`, hashing each chunk as it goes out (the hash of
   a chunk runs on a worker thread while the same chunk is written, so integrity costs little time and
   no copy of the data), and fsyncs each file. torch's per-record zip CRC32 is switched off for these
   writes (`zip_crc32=False`): SHA256SUMS already covers every byte, and the CRC pass would cost about
   as much time as the sha256 itself. torch.load does not check the CRC; `unzip -t` and Python's
   zipfile would report CRC errors on such files;
2. writes manifest.json (chained to the previous manifest) and SHA256SUMS, fsyncs them and the directory;
3. renames the directory to `step-N` and fsyncs the root: before the rename a reader sees no
   checkpoint, after it a complete one;
4. verifies the committed directory by reading it back, and only then prunes older checkpoints
   (renamed to `.deleting-...` first, so a crash mid-removal never leaves a half-deleted `step-N`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import dataclasses
import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Callable
from typing import Any

import torch

from . import checkpoint_format
from .atomic import open_new as _open_new
from .atomic import replace_text_atomically, write_bytes
from .atomic import write_all as _write_all

# Chunks at least this large are hashed on the worker thread while being written.
PARALLEL_HASH_BYTES = 1 << 20
# Largest slice handed to one os.write / one hash update.
WRITE_SLICE_BYTES = 8 << 20


_SYNC_FILE_RANGE_WRITE = 2


def _load_sync_file_range() -> Callable[[int, int, int], None]:
    """Linux sync_file_range(SYNC_FILE_RANGE_WRITE): start writeback of a range without waiting for it.

    Started per slice, the disk writes while the next slices are hashed and copied, so the final fsync
    has only the tail left. Elsewhere (or without glibc) a no-op: the final fsync does all the work.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.sync_file_range
    except (OSError, AttributeError):
        return lambda _fd, _offset, _length: None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int

    def start_writeback(fd: int, offset: int, length: int) -> None:
        function(fd, offset, length, _SYNC_FILE_RANGE_WRITE)  # advisory: a failure only loses the overlap

    return start_writeback


start_writeback = _load_sync_file_range()


class CheckpointSaveError(RuntimeError):
    """A save that could not be completed or did not verify after commit."""


class HashingFileWriter:
    """A write-only file object for torch.save that computes sha256 and size of what it writes.

    torch.save hands over memoryviews of tensor storage; they are written and hashed in place, in
    bounded slices, so a save never holds a second copy of the checkpoint in memory.
    """

    def __init__(self, fd: int, hasher_pool: concurrent.futures.Executor) -> None:
        self._fd = fd
        self._pool = hasher_pool
        self._digest = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        length = len(view)
        if length < PARALLEL_HASH_BYTES:
            self._digest.update(view)
            _write_all(self._fd, view)
        else:
            for start in range(0, length, WRITE_SLICE_BYTES):
                piece = view[start : start + WRITE_SLICE_BYTES]
                hashed = self._pool.submit(self._digest.update, piece)
                _write_all(self._fd, piece)
                start_writeback(self._fd, self.size + start, len(piece))
                hashed.result()
        self.size += length
        return length

    def flush(self) -> None:
        """Nothing is buffered here; durability comes from the fsync after torch.save."""

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


@contextlib.contextmanager
def _zip_crc32(enabled: bool):
    """torch.save's per-record CRC32 on or off for the duration (a process-wide torch setting)."""
    serialization = torch.serialization
    if not hasattr(serialization, "set_crc32_options"):  # torch < 2.4 always computes it
        yield
        return
    previous = serialization.get_crc32_options()
    serialization.set_crc32_options(enabled)
    try:
        yield
    finally:
        serialization.set_crc32_options(previous)


def save_payload(
    path: str, obj: Any, hasher_pool: concurrent.futures.Executor, zip_crc32: bool = False
) -> dict[str, Any]:
    """torch.save `obj` to a new file at `path`, fsynced; returns its {"size", "sha256"}."""
    fd = _open_new(path)
    try:
        writer = HashingFileWriter(fd, hasher_pool)
        with _zip_crc32(zip_crc32):
            torch.save(obj, writer)
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"size": writer.size, "sha256": writer.hexdigest()}


@dataclasses.dataclass(frozen=True)
class SavedCheckpoint:
    step: int
    path: str
    manifest_sha256: str
    bytes_total: int
    seconds: float


EventSink = Callable[..., None]


def drop_events(_event: str, **_fields: Any) -> None:
    """Default event sink: drop."""


class CheckpointWriter:
    """Commits checkpoints under one root for one run, chaining each manifest to the previous one."""

    def __init__(
        self,
        root: str,
        run_id: str,
        config_hash: str,
        source: dict[str, Any],
        world_size: int,
        keep_last: int,
        previous: tuple[int, str] | None = None,
        events: EventSink = drop_events,
    ) -> None:
        if keep_last < 1:
            raise ValueError("keep_last must be >= 1")
        self.root = root
        self.run_id = run_id
        self.config_hash = config_hash
        self.source = source
        self.world_size = world_size
        self.keep_last = keep_last
        self.previous = previous
        self._events = events
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-hash")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def commit(self, step: int, payloads: dict[str, Any], captured: dict[str, Any]) -> SavedCheckpoint:
        """Write and atomically commit step `step`; no verification or pruning (see save)."""
        started = time.monotonic()
        os.makedirs(self.root, exist_ok=True)
        final = os.path.join(self.root, checkpoint_format.step_dirname(step))
        if os.path.lexists(final):
            raise CheckpointSaveError(f"{final} already exists: refusing to overwrite a committed checkpoint")
        for name in payloads:
            if not checkpoint_format.is_payload_name(name):
                raise CheckpointSaveError(f"payload name {name!r} is not allowed by the checkpoint format")
        temp = os.path.join(self.root, checkpoint_format.temp_dirname(step, os.getpid(), secrets.token_hex(4)))
        os.mkdir(temp)
        files = {name: save_payload(os.path.join(temp, name), obj, self._pool) for name, obj in payloads.items()}
        manifest = checkpoint_format.build_manifest(
            step=step,
            run_id=self.run_id,
            config_hash=self.config_hash,
            source=self.source,
            world_size=self.world_size,
            captured=captured,
            files=files,
            previous_step=self.previous[0] if self.previous else None,
            previous_manifest_sha256=self.previous[1] if self.previous else None,
        )
        manifest_sha = write_bytes(
            os.path.join(temp, checkpoint_format.MANIFEST_NAME), checkpoint_format.manifest_bytes(manifest)
        )
        sums = {name: entry["sha256"] for name, entry in files.items()}
        sums[checkpoint_format.MANIFEST_NAME] = manifest_sha
        write_bytes(
            os.path.join(temp, checkpoint_format.SUMS_NAME), checkpoint_format.format_sums(sums).encode("utf-8")
        )
        checkpoint_format.fsync_dir(temp)
        os.rename(temp, final)
        checkpoint_format.fsync_dir(self.root)
        self.previous = (step, manifest_sha)
        replace_text_atomically(
            os.path.join(self.root, checkpoint_format.LATEST_NAME), checkpoint_format.step_dirname(step) + "\n"
        )
        total = sum(entry["size"] for entry in files.values())
        return SavedCheckpoint(step, final, manifest_sha, total, time.monotonic() - started)

    def save(self, step: int, payloads: dict[str, Any], captured: dict[str, Any]) -> SavedCheckpoint:
        """Commit, verify the committed checkpoint by reading it back, then prune to keep_last."""
        chained_to = self.previous
        saved = self.commit(step, payloads, captured)
        report = checkpoint_format.verify_checkpoint(saved.path)
        if not report.valid:
            self.previous = chained_to  # the next save chains to the last good checkpoint, not this one
            aside = checkpoint_format.move_aside(saved.path, checkpoint_format.ASIDE_CORRUPT)
            self._events("aside", path=aside, reason="; ".join(report.errors))
            raise CheckpointSaveError(f"checkpoint {saved.path} failed verification after commit: {report.errors}")
        self.prune(keep_step=step)
        return saved

    def prune(self, keep_step: int) -> list[str]:
        """Remove committed checkpoints older than the keep_last newest (which include keep_step).

        A checkpoint about to be removed is verified first: a corrupt one is moved aside instead,
        because corrupt checkpoints are evidence and are never deleted.
        """
        steps = sorted(
            (step for step in map(checkpoint_format.parse_step_dirname, os.listdir(self.root)) if step is not None),
            reverse=True,
        )
        older = [step for step in steps if step < keep_step]
        removed = []
        for step in older[self.keep_last - 1 :]:
            path = os.path.join(self.root, checkpoint_format.step_dirname(step))
            report = checkpoint_format.verify_checkpoint(path)
            if not report.valid:
                aside = checkpoint_format.move_aside(path, checkpoint_format.ASIDE_CORRUPT)
                self._events("aside", path=aside, reason="; ".join(report.errors))
                continue
            doomed = os.path.join(self.root, checkpoint_format.deleting_dirname(step, secrets.token_hex(4)))
            os.rename(path, doomed)
            checkpoint_format.fsync_dir(self.root)
            shutil.rmtree(doomed)
            removed.append(path)
            self._events("prune", path=path)
        return removed
