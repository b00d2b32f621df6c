"""Choosing the checkpoint to resume from: the newest that verifies and loads; corrupt ones moved aside."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
from typing import Any

import torch

from . import checkpoint_format
from .checkpoint_writer import EventSink

LOCK_NAME = checkpoint_format.WRITER_LOCK_NAME


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
        if checkpoint_format.parse_temp_dirname(name) is not None:
            aside = checkpoint_format.move_aside(path, checkpoint_format.ASIDE_PARTIAL)
            events("aside", path=aside, reason="partial save (temporary directory left by an interrupted save)")
        elif checkpoint_format.parse_deleting_dirname(name) is not None:
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


def load_verified(report: checkpoint_format.CheckpointReport, device: torch.device) -> LoadedCheckpoint:
    """Load every payload of a checkpoint that verified; raises PayloadLoadError when one does not load.
    The one way every rank loads a checkpoint."""
    assert report.manifest is not None and report.manifest_sha256 is not None and report.step is not None
    payloads = _load_payloads(report.path, report.manifest, device)
    return LoadedCheckpoint(report.step, report.path, report.manifest, report.manifest_sha256, payloads)


def load_chosen(path: str, device: torch.device) -> LoadedCheckpoint:
    """Load the checkpoint rank 0 chose (the other ranks). Rank 0 verified it in full; here its
    structure, sizes and manifest are checked again without hashing, then it loads like rank 0's."""
    report = checkpoint_format.verify_checkpoint(path, hash_files=False)
    if not report.valid:
        raise PayloadLoadError(f"{path} no longer verifies: {'; '.join(report.errors)}")
    return load_verified(report, device)


def load_newest_valid(root: str, device: torch.device, events: EventSink) -> LoadedCheckpoint | None:
    """Verify newest first; move every corrupt or unloadable checkpoint newer than the chosen one aside."""
    while True:
        report = checkpoint_format.verify_root(root, stop_at_first_valid=True, include_sealed=False)
        for corrupt in report.corrupt:
            aside = checkpoint_format.move_aside(corrupt.path, checkpoint_format.ASIDE_CORRUPT)
            events("aside", path=aside, step=corrupt.step, reason="; ".join(corrupt.errors))
        newest = report.newest_valid
        if newest is None:
            return None
        try:
            return load_verified(newest, device)
        except PayloadLoadError as exc:
            aside = checkpoint_format.move_aside(newest.path, checkpoint_format.ASIDE_CORRUPT)
            events("aside", path=aside, step=newest.step, reason=f"verified but did not load: {exc}")


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
