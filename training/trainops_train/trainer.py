"""The training loop: deterministic, resumable bit for bit, DDP-aware, checkpointing through the writer."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import json
import math
import os
import random
import subprocess
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
from ._format import fmt
from .cadence import CheckpointCadence
from .checkpoint_writer import CheckpointWriter, replace_text_atomically
from .data import DataPosition, ShardedSampler, make_dataset
from .model import build_model, weights_sha256
from .signals import EXIT_FAILED, EXIT_FINISHED, EXIT_INTERRUPTED, EXIT_USAGE, STATUS_BY_EXIT, StopFlag

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


@dataclasses.dataclass(frozen=True)
class RunLayout:
    """Where a run keeps its files (the pod-side layout: <durable>/trainops/<run_id>/)."""

    run_dir: str

    @property
    def ckpt_root(self) -> str:
        return os.path.join(self.run_dir, fmt.CKPT_DIRNAME)

    @property
    def metrics(self) -> str:
        return os.path.join(self.run_dir, "logs", "metrics.jsonl")

    @property
    def events(self) -> str:
        return os.path.join(self.run_dir, "logs", "events.jsonl")

    @property
    def result(self) -> str:
        return os.path.join(self.run_dir, "logs", "result.json")


def load_hooks(specs: Sequence[str]) -> list[TelemetryHook]:
    """Resolve 'module:callable' strings from the config into callables."""
    hooks = []
    for spec in specs:
        module_name, _sep, attribute = spec.partition(":")
        hook = getattr(importlib.import_module(module_name), attribute)
        if not callable(hook):
            raise config_lib.ConfigError(f"telemetry hook {spec!r} is not callable")
        hooks.append(hook)
    return hooks


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
    record = {
        "status": STATUS_BY_EXIT.get(result.exit_code, "failed"),
        "exit_code": result.exit_code,
        "step": result.step,
        "weights_sha256": result.weights_sha256,
        "checkpoint": result.checkpoint,
        "signal": signal_name,
        "reason": reason,
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(),
    }
    replace_text_atomically(layout.result, json.dumps(record, sort_keys=True, indent=2) + "\n")


def _clear_result(layout: RunLayout) -> None:
    """Remove an earlier life's result.json: until this life writes its own, the outcome is unknown (a
    SIGKILL writes nothing), and a stale 'interrupted' or 'finished' must not be read as this life's."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(layout.result)
        fmt.fsync_dir(os.path.dirname(layout.result))


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
        self.layout = RunLayout(os.path.abspath(run_dir))
        self.stop = stop or StopFlag()
        self.hooks = list(hooks) + load_hooks(config.telemetry_hooks)
        self.allow_config_change = allow_config_change or config.allow_config_change
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.config_hash = config_lib.config_hash(config)

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

        def emit(event: str, **fields: Any) -> None:
            if events is not None:
                events(event, **fields)

        lock_fd = None
        loaded: resume.LoadedCheckpoint | None = None

        def record_failure(exit_code: int, reason: str) -> None:
            """result.json for a life that ended refused or failed (rank 0, only while it holds the run)."""
            if lock_fd is not None:  # RootLocked: the run directory belongs to another trainer
                step = loaded.step if loaded is not None else 0
                _write_result(self.layout, RunResult(exit_code, step, None, None), self.stop.signal_name, reason)

        try:
            emit("start", rank=self.rank, world_size=self.world_size, config_hash=self.config_hash)
            failure: tuple[str, str] | None = None
            if self.rank == 0:
                try:
                    lock_fd = resume.lock_root(self.layout.ckpt_root)
                    _clear_result(self.layout)
                    resume.tidy_root(self.layout.ckpt_root, emit)
                    loaded = resume.load_newest_valid(self.layout.ckpt_root, torch.device("cpu"), emit)
                    if loaded is not None:
                        differences = resume.check_compatible(
                            loaded.manifest, self.config_hash, self.world_size, self.allow_config_change
                        )
                        if differences:
                            emit("config_change_allowed", differences=differences)
                except (resume.ResumeRefused, resume.RootLocked) as exc:
                    failure = ("refused", str(exc))
                except Exception as exc:  # the other ranks must hear of it rather than wait for a broadcast
                    failure = ("error", f"resume failed: {type(exc).__name__}: {exc}")
            # every rank loads the same committed checkpoint that rank 0 chose
            failure, chosen = self._broadcast((failure, loaded.path if loaded else None))
            if failure is not None:
                kind, reason = failure
                emit("refused" if kind == "refused" else "failed", reason=reason)
                record_failure(EXIT_USAGE if kind == "refused" else EXIT_FAILED, reason)
                raise resume.ResumeRefused(reason) if kind == "refused" else RuntimeError(reason)
            if chosen is not None and self.rank != 0:
                with open(os.path.join(chosen, fmt.MANIFEST_NAME), encoding="utf-8") as handle:
                    manifest = json.load(handle)
                payloads = {
                    name: torch.load(os.path.join(chosen, name), map_location="cpu", weights_only=True)
                    for name in sorted(manifest["files"])
                }
                loaded = resume.LoadedCheckpoint(manifest["step"], chosen, manifest, "", payloads)
            try:
                return self._train(device, loaded, emit)
            except Exception as exc:
                record_failure(EXIT_FAILED, f"{type(exc).__name__}: {exc}")
                raise
        finally:
            if events is not None:
                events.close()
            if lock_fd is not None:
                os.close(lock_fd)

    def _train(
        self, device: torch.device, loaded: resume.LoadedCheckpoint | None, emit: Callable[..., None]
    ) -> RunResult:
        config = self.config
        model = build_model(config.model, config.seed)
        inputs, labels = make_dataset(config.data, config.model, config.seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_factor(config.optim, config.steps))
        position = DataPosition(epoch=0, index=0, sampler_seed=config.seed + _SAMPLER_SEED_OFFSET)
        rng.seed_all(config.seed + _RANK_SEED_STRIDE * self.rank)
        step = 0
        previous: tuple[int, str] | None = None
        if loaded is not None:
            state = loaded.payloads["state.pt"]
            model.load_state_dict(loaded.payloads["model.pt"])
            optimizer.load_state_dict(loaded.payloads["optim.pt"]["optimizer"])
            scheduler.load_state_dict(loaded.payloads["optim.pt"]["scheduler"])
            step = int(state["step"])
            position = DataPosition(**{key: int(value) for key, value in state["data"].items()})
            rank_states = state["rng"]
            if self.rank < len(rank_states):
                rng.restore(rank_states[self.rank])
            previous = (loaded.step, loaded.manifest_sha256)
            emit("resume", step=step, path=loaded.path, manifest_sha256=loaded.manifest_sha256)
        model.to(device)
        # AdamW state loaded before the move follows the parameters' device lazily; move it explicitly.
        for slot in optimizer.state.values():
            for key, value in slot.items():
                if isinstance(value, torch.Tensor) and key != "step":
                    slot[key] = value.to(device)
        train_model: nn.Module = model
        if self.world_size > 1:
            train_model = nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None
            )
        sampler = ShardedSampler(config.data.samples, config.data.batch_size, self.rank, self.world_size, position)

        metrics = None
        writer = None
        if self.rank == 0:
            journal.truncate_metrics(self.layout.metrics, step)
            metrics = journal.JsonLines(self.layout.metrics)
            writer = CheckpointWriter(
                self.layout.ckpt_root,
                config.run_id,
                self.config_hash,
                source_identity(),
                self.world_size,
                config.checkpoint.keep_last,
                previous=previous,
                events=emit,
            )
        cadence = CheckpointCadence(config.checkpoint, step, time.monotonic())
        last_saved = step if loaded is not None else None
        last_checkpoint = loaded.path if loaded is not None else None
        started = time.monotonic()

        def save(at_step: int) -> None:
            nonlocal last_saved, last_checkpoint
            rank_states = [rng.capture()]
            if self.world_size > 1:
                gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
                dist.gather_object(rank_states[0], gathered, dst=0)
                rank_states = gathered or []
            if writer is not None and metrics is not None:
                metrics.sync()  # the journal up to this step is durable before the checkpoint exists
                emit("save_begin", step=at_step)
                began = time.monotonic()
                payloads = {
                    "model.pt": model.state_dict(),
                    "optim.pt": {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
                    "state.pt": {
                        "step": at_step,
                        "data": sampler.position.to_dict(),
                        "rng": rank_states,
                        "world_size": self.world_size,
                        "config_hash": self.config_hash,
                    },
                }
                captured = {
                    "rng": ["python", "numpy", "torch_cpu"] + (["torch_cuda"] if torch.cuda.is_available() else []),
                    "rng_ranks": len(rank_states),
                    "data_position": sampler.position.to_dict(),
                    "optimizer": type(optimizer).__name__,
                    "scheduler": type(scheduler).__name__,
                }
                saved = writer.save(at_step, payloads, captured)
                # C for the auto cadence: all the time training stood still for this save
                stalled = time.monotonic() - began
                cadence.saved(at_step, time.monotonic(), stalled)
                emit(
                    "save_end",
                    step=at_step,
                    path=saved.path,
                    seconds=saved.seconds,
                    bytes=saved.bytes_total,
                    stalled_s=stalled,
                    next_interval_s=cadence.interval_seconds(),
                )
                last_checkpoint = saved.path
            else:
                cadence.saved(at_step, time.monotonic(), 0.0)
            last_saved = at_step

        try:
            while True:
                finished = step >= config.steps
                # one collective per step boundary: any rank's stop flag, rank 0's cadence decision
                flags = torch.tensor(
                    [
                        1.0 if self.stop.is_set() else 0.0,
                        1.0 if self.rank == 0 and not finished and cadence.due(step, time.monotonic()) else 0.0,
                    ],
                    dtype=torch.float64,
                    device=device,
                )
                if self.world_size > 1:
                    dist.all_reduce(flags)
                stop_now, save_now = bool(flags[0] > 0), bool(flags[1] > 0)
                want_final = finished and config.checkpoint.save_on_finish
                if (save_now or stop_now or want_final) and last_saved != step and step > 0:
                    save(step)
                if finished or stop_now:
                    break
                loss, lr = self._train_step(train_model, optimizer, scheduler, sampler, inputs, labels, device)
                step += 1
                if metrics is not None:
                    now = time.time()
                    record = StepRecord(step, loss, lr, now, time.monotonic() - started)
                    metrics.append(
                        {
                            "step": step,
                            "loss": repr(loss),
                            "loss_hex": float.hex(loss),
                            "lr": repr(lr),
                            "lr_hex": float.hex(lr),
                            "wall_time": now,
                            "elapsed_s": record.elapsed_s,
                        }
                    )
                    for hook in self.hooks:
                        hook(record)
            exit_code = EXIT_FINISHED if finished else EXIT_INTERRUPTED
            result = RunResult(exit_code, step, weights_sha256(model), last_checkpoint)
            if self.rank == 0:
                emit("exit", status=STATUS_BY_EXIT[exit_code], exit_code=exit_code, step=step)
                _write_result(self.layout, result, self.stop.signal_name)
            if self.world_size > 1:
                dist.barrier()
            return result
        finally:
            if metrics is not None:
                metrics.close()
            if writer is not None:
                writer.close()

    def _train_step(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        sampler: ShardedSampler,
        inputs: torch.Tensor,
        labels: torch.Tensor,
        device: torch.device,
    ) -> tuple[float, float]:
        """One optimisation step; returns (loss averaged over ranks, lr used)."""
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
        lr = scheduler.get_last_lr()[0]
        loss = F.cross_entropy(model(batch), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        value = loss.detach().to(torch.float64).reshape(1)
        if self.world_size > 1:
            dist.all_reduce(value)
            value /= self.world_size
        return float(value.item()), float(lr)
