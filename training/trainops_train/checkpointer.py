"""Checkpointing during training: what a checkpoint holds, when one is due, saving it (rank 0 writes,
every rank contributes its RNG state) and restoring from one."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from . import journal, rng
from .cadence import CheckpointCadence
from .checkpoint_writer import CheckpointWriter, EventSink
from .config import CheckpointConfig
from .data import DataPosition
from .resume import LoadedCheckpoint

# The payload files of a trainer checkpoint.
MODEL_PAYLOAD = "model.pt"  # the model's state_dict
OPTIM_PAYLOAD = "optim.pt"  # {"optimizer": AdamW state_dict, "scheduler": LambdaLR state_dict}
STATE_PAYLOAD = "state.pt"  # step, data position, every rank's RNG states, world size, config hash
PAYLOAD_NAMES = (MODEL_PAYLOAD, OPTIM_PAYLOAD, STATE_PAYLOAD)


@dataclasses.dataclass
class TrainState:
    """What a checkpoint restores besides the RNGs. `position` is the sampler's own (it advances it) and
    `step` counts completed steps."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    position: DataPosition
    step: int = 0


def source_identity() -> dict[str, Any]:
    """Which code wrote a checkpoint: $TRAINOPS_SOURCE_COMMIT (set by the sync role) or git, when present."""
    identity: dict[str, Any] = {"package": "trainops_train"}
    commit = os.environ.get("TRAINOPS_SOURCE_COMMIT")
    if commit:
        identity["commit"] = commit
        return identity
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(
            ["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
        if head.returncode == 0:
            identity["commit"] = head.stdout.strip()
            dirty = subprocess.run(
                ["git", "-C", here, "status", "--porcelain", "--", "."],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            identity["dirty"] = bool(dirty.stdout.strip()) if dirty.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return identity


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """What every manifest of one run records about it."""

    run_id: str
    config_hash: str
    rank: int
    world_size: int


class Checkpointer:
    """Owns a run's checkpointing: restore from the checkpoint resumed from, the cadence, and saves
    through the writer (rank 0 only; the other ranks hand over their RNG states and follow the cadence).
    Call restore (when resuming), then open, then should_save/save at step boundaries, then close."""

    def __init__(self, root: str, settings: CheckpointConfig, run: RunIdentity, events: EventSink) -> None:
        self.root = root
        self.settings = settings
        self.run = run
        self._events = events
        self.writer: CheckpointWriter | None = None
        self.cadence: CheckpointCadence | None = None
        self.last_saved: int | None = None  # the step of the newest checkpoint, saved or resumed from
        self.last_checkpoint: str | None = None  # its path (rank 0)
        self._journal: journal.JsonLines | None = None
        self._previous: tuple[int, str] | None = None

    def restore(self, state: TrainState, loaded: LoadedCheckpoint) -> None:
        """Load a checkpoint's payloads into `state` and this rank's RNGs (before the model moves to its
        device); the next checkpoint chains to it."""
        state.model.load_state_dict(loaded.payloads[MODEL_PAYLOAD])
        optim = loaded.payloads[OPTIM_PAYLOAD]
        state.optimizer.load_state_dict(optim["optimizer"])
        state.scheduler.load_state_dict(optim["scheduler"])
        saved = loaded.payloads[STATE_PAYLOAD]
        state.step = int(saved["step"])
        state.position = DataPosition(**{key: int(value) for key, value in saved["data"].items()})
        rank_states = saved["rng"]
        if self.run.rank < len(rank_states):
            rng.restore(rank_states[self.run.rank])
        self._previous = (loaded.step, loaded.manifest_sha256)
        self.last_saved = state.step
        self.last_checkpoint = loaded.path
        self._events("resume", step=state.step, path=loaded.path, manifest_sha256=loaded.manifest_sha256)

    def open(self, step: int, metrics: journal.JsonLines | None) -> None:
        """Start the cadence at `step`; on rank 0 open the writer, chained to the checkpoint restored.
        `metrics` (rank 0) is made durable before every commit."""
        if self.run.rank == 0:
            self._journal = metrics
            self.writer = CheckpointWriter(
                self.root,
                self.run.run_id,
                self.run.config_hash,
                source_identity(),
                self.run.world_size,
                self.settings.keep_last,
                previous=self._previous,
                events=self._events,
            )
        self.cadence = CheckpointCadence(self.settings, step, time.monotonic())

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def due(self, step: int) -> bool:
        """Rank 0's cadence decision at a step boundary (the other ranks learn it from the all_reduce)."""
        assert self.cadence is not None, "open() first"
        return self.run.rank == 0 and self.cadence.due(step, time.monotonic())

    def should_save(self, step: int, requested: bool) -> bool:
        """A save at this boundary was requested (cadence, stop or finish) and this step has none yet."""
        return requested and self.last_saved != step and step > 0

    def save(self, state: TrainState) -> None:
        """Every rank: hand over the RNG state; rank 0 writes the checkpoint of `state.step`."""
        assert self.cadence is not None, "open() first"
        rank_states = self._gather_rng_states()
        if self.writer is None:
            self.cadence.saved(state.step, time.monotonic(), 0.0)
        else:
            self._write(state, rank_states)
        self.last_saved = state.step

    def _gather_rng_states(self) -> list[Any]:
        """Every rank's RNG states, in rank order, on rank 0 (empty elsewhere when distributed)."""
        rank_states = [rng.capture()]
        if self.run.world_size > 1:
            gathered: list[Any] | None = [None] * self.run.world_size if self.run.rank == 0 else None
            dist.gather_object(rank_states[0], gathered, dst=0)
            rank_states = gathered or []
        return rank_states

    def _write(self, state: TrainState, rank_states: list[Any]) -> None:
        assert self.writer is not None and self.cadence is not None
        if self._journal is not None:
            self._journal.sync()  # the journal up to this step is durable before the checkpoint exists
        self._events("save_begin", step=state.step)
        began = time.monotonic()
        saved = self.writer.save(state.step, self._payloads(state, rank_states), self._captured(state, rank_states))
        # C for the auto cadence: all the time training stood still for this save
        stalled = time.monotonic() - began
        self.cadence.saved(state.step, time.monotonic(), stalled)
        self._events(
            "save_end",
            step=state.step,
            path=saved.path,
            seconds=saved.seconds,
            bytes=saved.bytes_total,
            stalled_s=stalled,
            next_interval_s=self.cadence.interval_seconds(),
        )
        self.last_checkpoint = saved.path

    def _payloads(self, state: TrainState, rank_states: list[Any]) -> dict[str, Any]:
        return {
            MODEL_PAYLOAD: state.model.state_dict(),
            OPTIM_PAYLOAD: {"optimizer": state.optimizer.state_dict(), "scheduler": state.scheduler.state_dict()},
            STATE_PAYLOAD: {
                "step": state.step,
                "data": state.position.to_dict(),
                "rng": rank_states,
                "world_size": self.run.world_size,
                "config_hash": self.run.config_hash,
            },
        }

    def _captured(self, state: TrainState, rank_states: list[Any]) -> dict[str, Any]:
        return {
            "rng": ["python", "numpy", "torch_cpu"] + (["torch_cuda"] if torch.cuda.is_available() else []),
            "rng_ranks": len(rank_states),
            "data_position": state.position.to_dict(),
            "optimizer": type(state.optimizer).__name__,
            "scheduler": type(state.scheduler).__name__,
        }
