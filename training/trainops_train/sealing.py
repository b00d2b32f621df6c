"""Sealing a checkpoint that something else wrote, and finding the newest one that verifies.

A framework writes its checkpoint its own way (transformers' checkpoint-N/ in place, torch.save into a
file, Lightning through a temporary file): nothing says when it is complete, and every framework resumes
from "the newest by name or by mtime". `seal(path)` puts SHA256SUMS and a manifest (trainops-seal.json)
around it once the writer has finished: inside a directory, beside a file. Both are written under a
temporary name, fsynced and renamed, SHA256SUMS last, so a checkpoint is sealed completely or not at all.
`newest_sealed(root)` gives the newest checkpoint under root that verifies, moving aside (never deleting)
the newer ones that do not: corrupt, torn or never sealed. The format is checkpoint_format's (reader and
checkpoint_verify agree with it); standard library only.

Like the hooks, it runs in a user's trainer on the pod, whose Python may be as old as 3.8 (RunPod's images
ship 3.10): datetime.timezone.utc, typing.Callable and zip() without strict= stay (ruff's UP017, B905).
"""
# ruff: noqa: UP017, B905

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import hashlib
import logging
import os
import secrets
from typing import Any, Callable

from . import checkpoint_format as fmt
from .atomic import open_new, write_all

LOG = logging.getLogger("trainops_train")

EventSink = Callable[..., None]


class SealError(Exception):
    """A checkpoint that cannot be sealed (missing, empty, holding a link), or one sealed already that no
    longer verifies; the message names the path and what is wrong."""


@dataclasses.dataclass(frozen=True)
class SealedCheckpoint:
    """A sealed checkpoint that verified: load `path` (the directory or the file the framework wrote)."""

    path: str
    step: int
    layout: str  # "directory" or "file" (or "native": the reference trainer's own step-N/)
    bytes_total: int
    manifest: dict[str, Any] = dataclasses.field(repr=False, default_factory=dict)


def _log_event(event: str, **fields: Any) -> None:
    LOG.warning("%s: %s", event, fields)


def _hash_and_sync(base: str, relpath: str) -> tuple[str, int]:
    """(sha256, size) of one payload file, read once, and the file fsynced (the framework may not have)."""
    base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd, _info = fmt.open_relative(base_fd, relpath)
    finally:
        os.close(base_fd)
    try:
        digest, size = fmt.sha256_fd(fd, relpath)
        os.fsync(fd)
    finally:
        os.close(fd)
    return digest, size


def _hash_all(base: str, payload: list[str], workers: int | None) -> dict[str, dict[str, Any]]:
    """Every payload file hashed, on up to `workers` threads (hashlib releases the GIL; default: the cores)."""
    count = max(1, min(len(payload), workers or os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=count, thread_name_prefix="seal-hash") as pool:
        results = dict(zip(payload, pool.map(lambda name: _hash_and_sync(base, name), payload)))
    return {name: {"size": size, "sha256": digest} for name, (digest, size) in results.items()}


def _fsync_tree(path: str) -> None:
    """fsync a directory and every directory under it: the entries a framework created become durable."""
    for current, _dirs, _files in os.walk(path, followlinks=False):
        fmt.fsync_dir(current)


def _write_committed(base: str, name: str, data: bytes) -> None:
    """Write `name` in `base` under a temporary name, fsync it, rename it into place."""
    temp = os.path.join(base, f"{name}{fmt.SEAL_TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")
    fd = open_new(temp)
    try:
        write_all(fd, memoryview(data))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(temp)
        raise
    os.close(fd)
    os.replace(temp, os.path.join(base, name))


def _clear_torn_seal(paths: fmt.SealPaths) -> None:
    """Remove what a seal that died left (its temporaries, a manifest without SHA256SUMS): ours to remove."""
    for name in os.listdir(paths.base):
        if any(name.startswith(own + fmt.SEAL_TEMP_MARK) for own in (paths.sums_name, paths.seal_name)):
            os.unlink(os.path.join(paths.base, name))
    if os.path.lexists(paths.seal):
        os.unlink(paths.seal)


def _kind_of(path: str) -> str:
    if os.path.islink(path):
        raise SealError(f"{path} is a symbolic link: seal the checkpoint itself, not a link to it")
    if os.path.isdir(path):
        return fmt.SEAL_KIND_DIRECTORY
    if os.path.isfile(path):
        return fmt.SEAL_KIND_FILE
    if not os.path.lexists(path):
        raise SealError(f"{path} does not exist: nothing to seal")
    raise SealError(f"{path} is neither a regular file nor a directory")


def _already_sealed(path: str, paths: fmt.SealPaths) -> SealedCheckpoint | None:
    if not os.path.lexists(paths.sums):
        return None
    report = fmt.verify_sealed(path)
    if not report.valid:
        raise SealError(f"{path} is sealed already but does not verify: {'; '.join(report.errors)}")
    return _sealed_of(report)


def _sealed_of(report: fmt.CheckpointReport) -> SealedCheckpoint:
    assert report.step is not None
    return SealedCheckpoint(report.path, report.step, report.layout, report.bytes_total, dict(report.manifest or {}))


def seal(
    path: str | os.PathLike[str],
    step: int | None = None,
    *,
    world_size: int | None = None,
    run_id: str | None = None,
    config_hash: str | None = None,
    producer: dict[str, Any] | None = None,
    captured: dict[str, Any] | None = None,
    workers: int | None = None,
) -> SealedCheckpoint:
    """Seal the checkpoint at `path` (a directory, sealed in place, or a file, sealed beside it) once its
    writer has finished. `step` defaults to the last number in the name; `world_size` to $WORLD_SIZE (1).
    Sealing a checkpoint sealed already returns it when it still verifies (and raises SealError when it does
    not); a seal that died half-way is redone. Symbolic links, FIFOs and the like inside are refused, naming
    them: a sealed checkpoint holds regular files (and directories) only. Any failure is a SealError naming
    the path. Returns the checkpoint with the manifest it was sealed with."""
    path = os.path.abspath(os.fspath(path))
    try:
        if world_size is None:
            world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        return _seal(path, step, world_size, run_id, config_hash, producer, captured, workers)
    except SealError:
        raise
    except (OSError, ValueError) as exc:  # CheckpointFormatError is a ValueError
        raise SealError(f"{path} cannot be sealed: {type(exc).__name__}: {exc}") from exc


def _seal(
    path: str,
    step: int | None,
    world_size: int,
    run_id: str | None,
    config_hash: str | None,
    producer: dict[str, Any] | None,
    captured: dict[str, Any] | None,
    workers: int | None,
) -> SealedCheckpoint:
    kind = _kind_of(path)
    paths = fmt.SealPaths(path, kind)
    sealed = _already_sealed(path, paths)
    if sealed is not None:
        return sealed
    if step is None:
        step = fmt.step_from_name(os.path.basename(path))
        if step is None:
            raise SealError(f"{path}: no number in the name to take the step from; give step=")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise SealError(f"{path}: step must be a non-negative integer, got {step!r}")
    _clear_torn_seal(paths)
    payload, problems = fmt.sealed_payload(paths)
    problems += [f"{name}: the name is not one a seal can list" for name in payload if not fmt.sealed_relpath_ok(name)]
    if problems:
        raise SealError(f"{path} cannot be sealed: {'; '.join(problems)}")
    if not payload:
        raise SealError(f"{path} is an empty directory: nothing to seal")
    files = _hash_all(paths.base if kind == fmt.SEAL_KIND_DIRECTORY else os.path.dirname(path), payload, workers)
    if kind == fmt.SEAL_KIND_DIRECTORY:
        _fsync_tree(path)
    manifest: dict[str, Any] = {
        "format": fmt.SEAL_FORMAT_NAME,
        "format_version": fmt.SEAL_FORMAT_VERSION,
        "kind": kind,
        "step": step,
        "world_size": world_size,
        "run_id": run_id if run_id is not None else (os.environ.get("TRAINOPS_RUN_ID") or None),
        "config_hash": config_hash,
        "producer": dict(producer or {}),
        "captured": dict(captured or {}),
        "files": files,
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
    errors = fmt.seal_manifest_errors(manifest, kind)
    if errors:
        raise SealError(f"{path}: {'; '.join(errors)}")
    manifest_raw = fmt.manifest_bytes(manifest)
    sums = {name: entry["sha256"] for name, entry in files.items()}
    sums[paths.seal_name] = hashlib.sha256(manifest_raw).hexdigest()
    _write_committed(paths.base, paths.seal_name, manifest_raw)
    fmt.fsync_dir(paths.base)
    _write_committed(paths.base, paths.sums_name, "".join(f"{sums[name]}  {name}\n" for name in sorted(sums)).encode())
    fmt.fsync_dir(paths.base)
    if kind == fmt.SEAL_KIND_DIRECTORY:
        fmt.fsync_dir(os.path.dirname(path))
    return SealedCheckpoint(path, step, kind, sum(entry["size"] for entry in files.values()), manifest)


def newest_sealed(
    root: str | os.PathLike[str],
    *,
    move_aside: bool = True,
    on_event: EventSink | None = None,
) -> SealedCheckpoint | None:
    """The newest checkpoint under `root` that verifies (sealed ones and the reference trainer's own),
    ordered by the step each claims, never by name or mtime; None when there is none (or no root).

    Verification goes newest first and stops at the first that verifies. The newer ones passed over (a
    flipped byte, a missing file, a torn seal, a checkpoint never sealed) are moved aside as
    <name>.corrupt-<UTC> or <name>.unsealed-<UTC> so that no framework picks them up, never deleted; with
    move_aside=False they are only reported. Each is reported through on_event("aside", ...) (default: the
    "trainops_train" logger), and so are the unsealed entries left in place. Call it before training starts,
    while nothing writes under root."""
    emit = on_event or _log_event
    root = os.path.abspath(os.fspath(root))
    if not os.path.isdir(root):
        return None
    report = fmt.verify_root(root, stop_at_first_valid=True)
    newest = report.newest_valid
    now = datetime.datetime.now(datetime.timezone.utc)

    def _pass_over(path: str, step: int | None, kind: str, layout: str, errors: list[str]) -> None:
        """A newer checkpoint than the one chosen: moved aside ("aside", path = where it went) or, with
        move_aside=False, only named ("passed_over")."""
        if move_aside:
            moved = fmt.move_checkpoint_aside(path, kind, layout, now)
            emit("aside", path=moved, was=path, step=step, reason="; ".join(errors))
        else:
            emit("passed_over", path=path, step=step, reason="; ".join(errors))

    for checkpoint in report.checkpoints:
        if checkpoint is newest:
            break
        if not checkpoint.timed_out:
            _pass_over(checkpoint.path, checkpoint.step, fmt.ASIDE_CORRUPT, checkpoint.layout, checkpoint.errors)
    for entry in report.unsealed:
        newer = entry["step"] is not None and (newest is None or entry["step"] > (newest.step or 0))
        if newer and entry["why"] != "a symbolic link":
            layout = fmt.SEAL_KIND_DIRECTORY if os.path.isdir(entry["path"]) else fmt.SEAL_KIND_FILE
            _pass_over(entry["path"], entry["step"], fmt.ASIDE_UNSEALED, layout, ["not sealed: " + entry["why"]])
        else:
            emit("unsealed", path=entry["path"], step=entry["step"], reason="not sealed: " + entry["why"])
    return _sealed_of(newest) if newest is not None else None
