"""Choosing the checkpoint to resume from: the newest that verifies and loads; corrupt ones moved aside."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
from typing import Any

import torch

from ._format import fmt
from .checkpoint_writer import EventSink

LOCK_NAME = fmt.WRITER_LOCK_NAME


class ResumeRefused(RuntimeError):
    """The newest valid checkpoint was written under a different config and no override was given."""


class RootLocked(RuntimeError):
    """Another trainer holds the checkpoint root."""


@dataclasses.dataclass
class LoadedCheckpoint:
    step: int
    path: str
    manifest: dict[str, Any]
    manifest_sha256: str
    payloads: dict[str, Any]


def lock_root(root: str) -> int:
    """Take the root's writer lock (released by the kernel when the process dies, even by SIGKILL)."""
    os.makedirs(root, exist_ok=True)
    fd = os.open(os.path.join(root, LOCK_NAME), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise RootLocked(f"another trainer is writing checkpoints under {root}") from exc
    return fd


def tidy_root(root: str, events: EventSink) -> None:
    """Clear what interrupted saves and prunes left: partial saves are moved aside (kept for inspection),
    interrupted prunes finished. Only call while holding the root's writer lock."""
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if fmt.parse_temp_dirname(name) is not None:
            aside = fmt.move_aside(path, fmt.ASIDE_PARTIAL)
            events("aside", path=aside, reason="partial save (temporary directory left by an interrupted save)")
        elif fmt.parse_deleting_dirname(name) is not None:
            shutil.rmtree(path)
            events("prune_finished", path=path)


class PayloadLoadError(RuntimeError):
    """A payload file that verified but torch.load (weights_only) rejects."""


def _load_payloads(path: str, manifest: dict[str, Any], device: torch.device) -> dict[str, Any]:
    payloads = {}
    for name in sorted(manifest["files"]):
        try:
            payloads[name] = torch.load(os.path.join(path, name), map_location=device, weights_only=True)
        except Exception as exc:  # any unpickling failure makes the checkpoint unusable
            raise PayloadLoadError(f"{name}: load failed: {type(exc).__name__}: {exc}") from exc
    return payloads


def load_newest_valid(root: str, device: torch.device, events: EventSink) -> LoadedCheckpoint | None:
    """Verify newest first; move every corrupt or unloadable checkpoint newer than the chosen one aside."""
    while True:
        report = fmt.verify_root(root, stop_at_first_valid=True)
        for corrupt in report.corrupt:
            aside = fmt.move_aside(corrupt.path, fmt.ASIDE_CORRUPT)
            events("aside", path=aside, step=corrupt.step, reason="; ".join(corrupt.errors))
        newest = report.newest_valid
        if newest is None:
            return None
        assert newest.manifest is not None and newest.manifest_sha256 is not None and newest.step is not None
        try:
            payloads = _load_payloads(newest.path, newest.manifest, device)
        except PayloadLoadError as exc:
            aside = fmt.move_aside(newest.path, fmt.ASIDE_CORRUPT)
            events("aside", path=aside, step=newest.step, reason=f"verified but did not load: {exc}")
            continue
        return LoadedCheckpoint(newest.step, newest.path, newest.manifest, newest.manifest_sha256, payloads)


def check_compatible(manifest: dict[str, Any], config_hash: str, world_size: int, allow_change: bool) -> list[str]:
    """Differences between the checkpoint and this run; raises ResumeRefused unless allow_change."""
    differences = []
    if manifest["config_hash"] != config_hash:
        differences.append(f"config hash {manifest['config_hash']} (checkpoint) != {config_hash} (this run)")
    if manifest["world_size"] != world_size:
        differences.append(f"world size {manifest['world_size']} (checkpoint) != {world_size} (this run)")
    if differences and not allow_change:
        raise ResumeRefused(
            f"refusing to resume from step {manifest['step']}: "
            + "; ".join(differences)
            + " (pass --allow-config-change or set allow_config_change: true to resume anyway)"
        )
    return differences
