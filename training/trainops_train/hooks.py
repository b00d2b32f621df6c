"""Hooks for your own training loop: what the train role and the resume drill need of any trainer.

Add about ten lines to a loop you already have (docs/trainer_contract.md shows the diff):

    from trainops_train import hooks

    run = hooks.Run()                                  # journal, stop flag, pacing, result.json
    found = run.resume()                               # the newest checkpoint under ckpt/ that verifies
    if found:
        start = load_your_checkpoint(found.path)       # your torch.load, as before
    for step in range(start + 1, total + 1):
        loss = train_one_step(...)
        run.log_step(step, loss, lr=scheduler.get_last_lr()[0])
        if step % every == 0 or run.stop_requested:
            with run.checkpoint(f"{run.ckpt_dir}/step-{step}.pt", step) as path:
                torch.save(state, path)                # your save, as before; sealed when the block ends
            if run.stop_requested:
                sys.exit(run.interrupted(step))        # 75: interrupted, run again to resume
    sys.exit(run.finish(model, step=total))            # 0, with the final weights' sha256

Where things go comes from the environment the train role and the drill set: TRAINOPS_RUN_DIR (the run
directory: logs/ and ckpt/), TRAINOPS_CONFIG (the path of a JSON config file), TRAINOPS_DRILL_STEP_DELAY_S
(the drill's pacing). Only the standard library is imported here; torch only inside weights_sha256, when
it is given a model or tensors. Python 3.8 or later (a pod's python3, whatever the image ships).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from . import journal, run_layout
from .sealing import SealedCheckpoint, SealError, newest_sealed, seal
from .signals import StopFlag

__all__ = [
    "EXIT_FAILED",
    "EXIT_FINISHED",
    "EXIT_INTERRUPTED",
    "Run",
    "SealError",
    "SealedCheckpoint",
    "load_config",
    "newest_sealed",
    "seal",
    "weights_sha256",
]

EXIT_FINISHED = run_layout.EXIT_FINISHED
EXIT_FAILED = run_layout.EXIT_FAILED
EXIT_INTERRUPTED = run_layout.EXIT_INTERRUPTED

RUN_DIR_ENV = "TRAINOPS_RUN_DIR"
CONFIG_ENV = "TRAINOPS_CONFIG"
STEP_DELAY_ENV = "TRAINOPS_DRILL_STEP_DELAY_S"
DEFAULT_RUN_DIR = "trainops-run"


def load_config(default: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run's config: the JSON file TRAINOPS_CONFIG names (a path, never JSON text), else `default`."""
    path = os.environ.get(CONFIG_ENV, "")
    if not path:
        return dict(default or {})
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    if not isinstance(config, dict):
        raise ValueError(f"{CONFIG_ENV}={path} holds {type(config).__name__}, not a JSON object")
    return config


def weights_sha256(weights: Any) -> str:
    """sha256 over a model's (or a state dict's) tensors: name, dtype, shape and raw bytes, in name order.
    Two runs with bit-identical weights give the same hex, whatever device they were on."""
    import torch

    state = weights.state_dict() if hasattr(weights, "state_dict") else weights
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name]
        if not isinstance(tensor, torch.Tensor):
            continue
        tensor = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        # reshape(-1): a 0-dim tensor (BatchNorm's num_batches_tracked) cannot be viewed as bytes itself
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def exact_float(value: Any) -> float:
    """A Python float of a number or a one-element tensor (float32 widens to float64 exactly)."""
    if hasattr(value, "item"):
        value = value.item()
    return float(value)


class Run:
    """One life of your trainer under trainops: the journal (logs/metrics.jsonl, logs/events.jsonl), the
    stop flag SIGTERM and SIGINT set, sealed checkpoints under ckpt/, and logs/result.json.

    Only rank 0 (RANK) writes the journal, the events and the result; every rank gets the stop flag."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        *,
        ckpt_dir: str | os.PathLike[str] | None = None,
        rank: int | None = None,
        handle_signals: bool = True,
        step_delay_s: float | None = None,
    ) -> None:
        chosen = run_dir if run_dir is not None else (os.environ.get(RUN_DIR_ENV) or DEFAULT_RUN_DIR)
        self.layout = run_layout.RunLayout.from_run_dir(os.path.abspath(os.fspath(chosen)))
        self.run_dir = self.layout.run_dir
        self.ckpt_dir = os.path.abspath(os.fspath(ckpt_dir)) if ckpt_dir is not None else self.layout.ckpt
        self.rank = rank if rank is not None else int(os.environ.get("RANK", "0") or 0)
        self.world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.stop = StopFlag()
        if handle_signals:
            self.stop.install()
        if step_delay_s is None:
            step_delay_s = float(os.environ.get(STEP_DELAY_ENV, "0") or 0)
        self.step_delay_s = max(0.0, step_delay_s)
        self.step: int | None = None
        self.last_checkpoint: str | None = None
        self._began = time.time()
        self._metrics: journal.JsonLines | None = None
        self._events: journal.EventLog | None = None
        os.makedirs(self.ckpt_dir, exist_ok=True)
        if self.rank == 0:
            journal.clear_result(self.layout.result)
            self._metrics = journal.JsonLines(self.layout.metrics)
            self._events = journal.EventLog(self.layout.events)
        self.event("start", rank=self.rank, world_size=self.world_size, argv=list(sys.argv))

    # ----------------------------------------------------------------------------- journal

    @property
    def stop_requested(self) -> bool:
        """True once SIGTERM or SIGINT arrived: checkpoint at this step boundary, then exit 75."""
        return self.stop.is_set()

    def event(self, name: str, **fields: Any) -> None:
        """One line of logs/events.jsonl: {"event": name, "time": epoch seconds, "pid": ..., **fields}."""
        if self._events is not None:
            self._events(name, **fields)

    def log_step(self, step: int, loss: Any, lr: Any = None, pace: bool = True, **extra: Any) -> None:
        """The journal's line for a finished step: loss and lr exact (repr and float.hex), then the drill's
        pacing (TRAINOPS_DRILL_STEP_DELAY_S, 0 outside a drill) unless pace=False. `extra` must be JSON."""
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be a non-negative integer, got {step!r}")
        self.step = step
        if self._metrics is not None:
            now = time.time()
            record = journal.step_record(
                step, exact_float(loss), None if lr is None else exact_float(lr), now, now - self._began
            )
            self._metrics.append({**extra, **record})
        if pace:
            self.pace()

    def sync(self) -> None:
        """Make the journal written so far durable (fsync): before a checkpoint counts, every step up to it must
        be on disk. `checkpoint` does it itself; call it before `seal` when your framework wrote the checkpoint."""
        if self._metrics is not None:
            self._metrics.sync()

    def pace(self) -> None:
        """Sleep the drill's per-step delay, so that its interruption lands in the middle of the run."""
        if self.step_delay_s > 0:
            time.sleep(self.step_delay_s)

    # ------------------------------------------------------------------------------ checkpoints

    def resume(self, move_aside: bool = True) -> SealedCheckpoint | None:
        """The newest checkpoint under ckpt_dir that verifies (see sealing.newest_sealed), recorded as this
        life's resume point; None when there is none (a fresh start). Rank 0 chooses: with several ranks,
        broadcast found.path yourself (or call this on rank 0 only and share the answer)."""
        if self.rank != 0:
            return None
        found = newest_sealed(self.ckpt_dir, move_aside=move_aside, on_event=self.event)
        if found is not None:
            self.resumed(found.step, found.path)
        return found

    def resumed(self, step: int, path: str) -> None:
        """Record that this life resumes after `step` from `path`. The journal loses its lines past `step`
        (the steps run again; a dead life's lines would otherwise stand beside the new ones)."""
        if self._metrics is not None:
            self._metrics.sync()
            dropped = journal.truncate_metrics(self.layout.metrics, step)
            self._metrics.close()
            self._metrics = journal.JsonLines(self.layout.metrics)
            self.event("resume", step=step, path=os.fspath(path), journal_lines_dropped=dropped)
        self.step = step

    def seal(self, path: str | os.PathLike[str], step: int | None = None, **manifest: Any) -> SealedCheckpoint:
        """Seal a checkpoint your code has finished writing (sealing.seal); rank 0 only, after your own
        barrier when several ranks write parts of it. Returns it as the verifier reads it back."""
        fields = {"world_size": self.world_size, "run_id": os.environ.get("TRAINOPS_RUN_ID"), **manifest}
        sealed = seal(path, step, **fields)
        self.last_checkpoint = sealed.path
        return sealed

    @contextlib.contextmanager
    def checkpoint(self, path: str | os.PathLike[str], step: int, **manifest: Any) -> Iterator[str]:
        """`with run.checkpoint(path, step) as path:` write your checkpoint to path (a file, or a directory
        you create); it is sealed when the block ends without an exception, and save_begin/save_end events
        with its step, seconds and bytes are journaled. The journal is fsynced first: every step up to this
        checkpoint is durable before it counts."""
        target = os.path.abspath(os.fspath(path))
        self.sync()
        self.event("save_begin", step=step, path=target)
        began = time.monotonic()
        yield target
        sealed = self.seal(target, step, **manifest) if self.rank == 0 else None
        seconds = time.monotonic() - began
        self.event(
            "save_end",
            step=step,
            path=target,
            seconds=seconds,
            stalled_s=seconds,
            bytes=sealed.bytes_total if sealed else None,
        )

    # ------------------------------------------------------------------------------------ the end

    def finish(self, weights: Any = None, step: int | None = None) -> int:
        """result.json "finished" with the final weights' sha256 (a model, a state dict or a hex digest);
        returns 0 for sys.exit."""
        return self._end(EXIT_FINISHED, step, weights)

    def interrupted(self, step: int | None = None, weights: Any = None) -> int:
        """result.json "interrupted" (after the checkpoint of this step boundary); returns 75 for sys.exit."""
        return self._end(EXIT_INTERRUPTED, step, weights)

    def failed(self, reason: str, step: int | None = None) -> int:
        """result.json "failed" naming the reason; returns 1 for sys.exit."""
        return self._end(EXIT_FAILED, step, None, reason)

    def _end(self, exit_code: int, step: int | None, weights: Any, reason: str | None = None) -> int:
        step = self.step if step is None else step
        digest = weights if isinstance(weights, str) or weights is None else weights_sha256(weights)
        status = run_layout.status_for_exit(exit_code)
        self.event("exit", status=status, exit_code=exit_code, step=step)
        if self.rank == 0:
            journal.write_result(
                self.layout.result,
                exit_code,
                step,
                digest,
                checkpoint=self.last_checkpoint,
                signal=self.stop.signal_name,
                reason=reason,
            )
        self.close()
        return exit_code

    def close(self) -> None:
        """Flush and close the journal (finish, interrupted and failed call it)."""
        for handle in (self._metrics, self._events):
            if handle is not None:
                handle.sync()
                handle.close()
        self._metrics = self._events = None
