"""The training loop: deterministic, resumable bit for bit, DDP-aware, checkpointing through the Checkpointer."""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import pkgutil
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from . import config as config_lib
from . import journal, resume, rng
from .checkpoint_writer import EventSink, drop_events
from .checkpointer import Checkpointer, RunIdentity, TrainState
from .data import DataPosition, ShardedSampler, make_dataset
from .hooks import weights_sha256
from .model import build_model
from .run_layout import (
    EXIT_FAILED,
    EXIT_FINISHED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    STATUS_REFUSED,
    RunLayout,
    status_for_exit,
)
from .signals import StopFlag

__all__ = [
    "EXIT_FAILED",
    "EXIT_FINISHED",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "RunResult",
    "StepRecord",
    "StopFlag",
    "Trainer",
]

# Seeds of the different random streams stay apart from each other and from other ranks.
_SAMPLER_SEED_OFFSET = 2
_RANK_SEED_STRIDE = 7919
# Bounded wait for the other ranks in every collective.
_COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=300)


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """What the telemetry hooks receive after every step (rank 0)."""

    step: int
    loss: float
    lr: float
    wall_time: float
    elapsed_s: float


TelemetryHook = Callable[[StepRecord], None]


@dataclasses.dataclass(frozen=True)
class RunResult:
    exit_code: int
    step: int
    weights_sha256: str | None
    checkpoint: str | None


def load_hooks(specs: Sequence[str]) -> list[TelemetryHook]:
    """Resolve 'module:callable' strings from the config into callables."""
    hooks = []
    for spec in specs:
        hook = pkgutil.resolve_name(spec)
        if not callable(hook):
            raise config_lib.ConfigError(f"telemetry hook {spec!r} is not callable")
        hooks.append(hook)
    return hooks


def _lr_factor(optim: config_lib.OptimConfig, total_steps: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        span = max(1, total_steps - optim.warmup_steps)
        progress = min(1.0, (step - optim.warmup_steps) / span)
        return optim.min_lr_ratio + (1 - optim.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def _pick_device(setting: str, local_rank: int) -> torch.device:
    if setting == "cuda" or (setting == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise config_lib.ConfigError("device is cuda but CUDA is not available")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _write_result(layout: RunLayout, result: RunResult, signal_name: str | None, reason: str | None = None) -> None:
    journal.write_result(
        layout.result,
        result.exit_code,
        result.step,
        result.weights_sha256,
        checkpoint=result.checkpoint,
        signal=signal_name,
        reason=reason,
    )


def _fresh_state(config: config_lib.TrainConfig, model: nn.Module) -> TrainState:
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_factor(config.optim, config.steps))
    position = DataPosition(epoch=0, index=0, sampler_seed=config.seed + _SAMPLER_SEED_OFFSET)
    return TrainState(model, optimizer, scheduler, position)


def _move_to(state: TrainState, device: torch.device) -> None:
    state.model.to(device)
    # AdamW state loaded before the move follows the parameters' device lazily; move it explicitly.
    for slot in state.optimizer.state.values():
        for key, value in slot.items():
            if isinstance(value, torch.Tensor) and key != "step":
                slot[key] = value.to(device)


def _metrics_record(record: StepRecord) -> dict[str, Any]:
    return journal.step_record(record.step, record.loss, record.lr, record.wall_time, record.elapsed_s)


class Trainer:
    """One training process (one rank). Build, then call run()."""

    def __init__(
        self,
        config: config_lib.TrainConfig,
        run_dir: str,
        stop: StopFlag | None = None,
        hooks: Sequence[TelemetryHook] = (),
        allow_config_change: bool = False,
    ) -> None:
        self.config = config
        self.layout = RunLayout.from_run_dir(os.path.abspath(run_dir))
        self.stop = stop or StopFlag()
        self.hooks = list(hooks) + load_hooks(config.telemetry_hooks)
        self.allow_config_change = allow_config_change or config.allow_config_change
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.config_hash = config_lib.config_hash(config)
        self._lock_fd: int | None = None  # rank 0's hold on the run (the checkpoint root's writer lock)

    # --------------------------------------------------------------------------------- setup

    def _setup_process(self) -> torch.device:
        # cuBLAS needs this before its first use to be deterministic; harmless on CPU.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.set_num_threads(self.config.threads)
        device = _pick_device(self.config.device, self.local_rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
            torch.backends.cudnn.benchmark = False
        if self.world_size > 1 and not dist.is_initialized():
            backend = "nccl" if device.type == "cuda" else "gloo"
            dist.init_process_group(backend=backend, timeout=_COLLECTIVE_TIMEOUT)
        return device

    def _broadcast(self, value: Any) -> Any:
        if self.world_size == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    # ----------------------------------------------------------------------------------- run

    def run(self) -> RunResult:
        device = self._setup_process()
        events = journal.EventLog(self.layout.events) if self.rank == 0 else None
        emit: EventSink = events if events is not None else drop_events
        try:
            emit("start", rank=self.rank, world_size=self.world_size, config_hash=self.config_hash)
            loaded = self._resume(emit)
            try:
                return self._train(device, loaded, emit)
            except Exception as exc:
                self._record_failure(EXIT_FAILED, f"{type(exc).__name__}: {exc}", loaded)
                raise
        finally:
            if events is not None:
                events.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def _record_failure(self, exit_code: int, reason: str, loaded: resume.LoadedCheckpoint | None) -> None:
        """result.json for a life that ended refused or failed (rank 0, only while it holds the run)."""
        if self._lock_fd is not None:  # RootLocked: the run directory belongs to another trainer
            step = loaded.step if loaded is not None else 0
            _write_result(self.layout, RunResult(exit_code, step, None, None), self.stop.signal_name, reason)

    def _resume(self, emit: EventSink) -> resume.LoadedCheckpoint | None:
        """Rank 0 takes the run and chooses the checkpoint; every rank then loads that same checkpoint."""
        loaded, failure = self._choose_checkpoint(emit) if self.rank == 0 else (None, None)
        failure, chosen = self._broadcast((failure, loaded.path if loaded else None))
        if failure is not None:
            status, reason = failure
            refused = status == STATUS_REFUSED
            emit(status, reason=reason)
            self._record_failure(EXIT_USAGE if refused else EXIT_FAILED, reason, loaded)
            raise resume.ResumeRefused(reason) if refused else RuntimeError(reason)
        if chosen is not None and self.rank != 0:
            loaded = resume.load_chosen(chosen, torch.device("cpu"))
        return loaded

    def _choose_checkpoint(self, emit: EventSink) -> tuple[resume.LoadedCheckpoint | None, tuple[str, str] | None]:
        """Rank 0: lock the run, tidy its checkpoint root, load the newest valid checkpoint. Returns it and
        (status, reason) when this life must end here, which the other ranks must hear of rather than
        wait for a broadcast."""
        loaded = None
        root = self.layout.ckpt
        try:
            self._lock_fd = resume.lock_root(root)
            journal.clear_result(self.layout.result)
            resume.tidy_root(root, emit)
            loaded = resume.load_newest_valid(root, torch.device("cpu"), emit)
            if loaded is not None:
                differences = resume.check_compatible(
                    loaded.manifest, self.config_hash, self.world_size, self.allow_config_change
                )
                if differences:
                    emit("config_change_allowed", differences=differences)
        except (resume.ResumeRefused, resume.RootLocked) as exc:
            return loaded, (STATUS_REFUSED, str(exc))
        except Exception as exc:
            return loaded, (status_for_exit(EXIT_FAILED), f"resume failed: {type(exc).__name__}: {exc}")
        return loaded, None

    def _train(self, device: torch.device, loaded: resume.LoadedCheckpoint | None, emit: EventSink) -> RunResult:
        config = self.config
        model = build_model(config.model, config.seed)
        inputs, labels = make_dataset(config.data, config.model, config.seed)
        state = _fresh_state(config, model)
        rng.seed_all(config.seed + _RANK_SEED_STRIDE * self.rank)
        identity = RunIdentity(config.run_id, self.config_hash, self.rank, self.world_size)
        checkpointer = Checkpointer(self.layout.ckpt, config.checkpoint, identity, emit)
        if loaded is not None:
            checkpointer.restore(state, loaded)
        _move_to(state, device)
        train_model: nn.Module = state.model
        if self.world_size > 1:
            train_model = nn.parallel.DistributedDataParallel(
                state.model, device_ids=[device.index] if device.type == "cuda" else None
            )
        sampler = ShardedSampler(
            config.data.samples, config.data.batch_size, self.rank, self.world_size, state.position
        )
        metrics = None
        if self.rank == 0:
            journal.truncate_metrics(self.layout.metrics, state.step)
            metrics = journal.JsonLines(self.layout.metrics)
        try:
            checkpointer.open(state.step, metrics)

            def step_once() -> tuple[float, float]:
                return self._train_step(train_model, state, sampler, inputs, labels, device)

            finished = self._loop(state, checkpointer, metrics, step_once, device)
            return self._finish(state, checkpointer, finished, emit)
        finally:
            if metrics is not None:
                metrics.close()
            checkpointer.close()

    def _loop(
        self,
        state: TrainState,
        checkpointer: Checkpointer,
        metrics: journal.JsonLines | None,
        step_once: Callable[[], tuple[float, float]],
        device: torch.device,
    ) -> bool:
        """Train until every configured step is done (True) or a stop was requested (False), saving at the
        step boundaries where a checkpoint is due, a stop was requested, or the run finished."""
        started = time.monotonic()
        while True:
            finished = state.step >= self.config.steps
            stop_now, save_now = self._boundary_flags(finished, checkpointer, state.step, device)
            want_final = finished and self.config.checkpoint.save_on_finish
            if checkpointer.should_save(state.step, save_now or stop_now or want_final):
                checkpointer.save(state)
            if finished or stop_now:
                return finished
            loss, lr = step_once()
            state.step += 1
            if metrics is not None:
                now = time.time()
                record = StepRecord(state.step, loss, lr, now, time.monotonic() - started)
                metrics.append(_metrics_record(record))
                for hook in self.hooks:
                    hook(record)

    def _boundary_flags(
        self, finished: bool, checkpointer: Checkpointer, step: int, device: torch.device
    ) -> tuple[bool, bool]:
        """(stop, save): one collective per step boundary combines any rank's stop flag with rank 0's
        cadence decision, so every rank stops, or saves, at the same step."""
        flags = torch.tensor(
            [
                1.0 if self.stop.is_set() else 0.0,
                1.0 if not finished and checkpointer.due(step) else 0.0,
            ],
            dtype=torch.float64,
            device=device,
        )
        if self.world_size > 1:
            dist.all_reduce(flags)
        return bool(flags[0] > 0), bool(flags[1] > 0)

    def _finish(self, state: TrainState, checkpointer: Checkpointer, finished: bool, emit: EventSink) -> RunResult:
        exit_code = EXIT_FINISHED if finished else EXIT_INTERRUPTED
        result = RunResult(exit_code, state.step, weights_sha256(state.model), checkpointer.last_checkpoint)
        if self.rank == 0:
            emit("exit", status=status_for_exit(exit_code), exit_code=exit_code, step=state.step)
            _write_result(self.layout, result, self.stop.signal_name)
        if self.world_size > 1:
            dist.barrier()
        return result

    def _train_step(
        self,
        model: nn.Module,
        state: TrainState,
        sampler: ShardedSampler,
        inputs: torch.Tensor,
        labels: torch.Tensor,
        device: torch.device,
    ) -> tuple[float, float]:
        """One optimisation step of `model` (state.model, or DDP around it); returns (loss averaged over
        ranks, lr used)."""
        config = self.config
        indices = sampler.next_indices()
        batch, targets = inputs[indices], labels[indices]
        # augmentation draws from all three RNGs (python, numpy, torch) so that a resume which failed
        # to restore any of them would diverge, and the tests would see it
        scale = 1.0 + 0.1 * random.random()
        keep = torch.from_numpy(np.random.random(config.model.input_dim) >= config.data.feature_drop)
        noise = torch.randn(batch.shape) * config.data.noise
        batch = (batch * scale + noise) * keep.to(batch.dtype)
        batch, targets = batch.to(device), targets.to(device)
        model.train()
        lr = state.scheduler.get_last_lr()[0]
        loss = F.cross_entropy(model(batch), targets)
        state.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        state.optimizer.step()
        state.scheduler.step()
        value = loss.detach().to(torch.float64).reshape(1)
        if self.world_size > 1:
            dist.all_reduce(value)
            value /= self.world_size
        return float(value.item()), float(lr)
