"""Hugging Face `Trainer` under trainops: one callback gives a stock script the trainer contract.

Add it to the script you have (about ten lines; docs/trainer_contract.md):

    from trainops_train.hf import TrainopsCallback

    trainops = TrainopsCallback()                         # journal, seals, SIGTERM -> save and stop
    args = TrainingArguments(output_dir=trainops.ckpt_dir, logging_steps=1, logging_nan_inf_filter=False,
                             save_strategy="steps", save_steps=..., ...)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[trainops])
    trainer.train(resume_from_checkpoint=trainops.resume())   # the newest sealed checkpoint-N, or None
    sys.exit(trainops.exit_code(trainer))                 # 0 finished, 75 interrupted (run again to resume)

What it does, on the Trainer's own events (transformers is imported only here, and only when this module is):
- journal: each logged step's exact loss and learning rate (`logging_steps=1` gives one line per step; the
  Trainer's loss is then that step's own, not an average), then the drill's pacing;
- seal: each `checkpoint-N` once `on_save` says the Trainer wrote it (after a barrier when several ranks
  wrote parts of it): `SHA256SUMS` and `trainops-seal.json` inside, so a half-written one is never resumed;
- SIGTERM (or SIGINT): the step in progress finishes, then the Trainer saves `checkpoint-N` and stops, and
  `exit_code` says 75 (the Trainer's own JIT checkpoint may save in the middle of a step and exits 0);
- resume: the newest checkpoint under `output_dir` that verifies, never the Trainer's own pick (the highest
  `checkpoint-N` by name, complete or not); newer ones that do not verify are moved aside.
"""

from __future__ import annotations

import os
import time
from typing import Any

from transformers import TrainerCallback

from . import hooks

__all__ = ["TrainopsCallback", "check_arguments"]


def _value(args: Any, name: str, default: Any = None) -> Any:
    value = getattr(args, name, default)
    return getattr(value, "value", value)  # an enum (IntervalStrategy, SaveStrategy) as its string


def check_arguments(args: Any) -> list[str]:
    """What in the TrainingArguments breaks the contract, each named with the value to use (empty: none)."""
    problems = []
    if _value(args, "save_strategy", "steps") not in ("steps", "no"):
        problems.append(
            "save_strategy 'steps' or 'no' (with 'best' an evaluation overrides the save a SIGTERM asks for; with "
            "'epoch' a stop at an epoch's end saves the sealed checkpoint-N again)"
        )
    if getattr(args, "save_only_model", False):
        problems.append("save_only_model=False (a checkpoint without its optimizer and RNG cannot be resumed)")
    if getattr(args, "logging_steps", None) != 1 or _value(args, "logging_strategy", "steps") != "steps":
        problems.append("logging_steps=1 with logging_strategy='steps' (one journal line per step, its own loss)")
    if getattr(args, "logging_nan_inf_filter", False):
        problems.append("logging_nan_inf_filter=False (a filtered step logs another step's loss)")
    if getattr(args, "enable_jit_checkpoint", False):
        problems.append("enable_jit_checkpoint=False (it saves in the middle of a step and exits 0)")
    if getattr(args, "save_total_limit", None) is not None:
        problems.append(
            "save_total_limit=None (the Trainer's rotation counts checkpoints moved aside as checkpoint-N.unsealed-*, "
            "deletes them, and can delete the sealed checkpoint resumed from before the next is sealed)"
        )
    return problems


class TrainopsCallback(TrainerCallback):
    """The trainer contract for `transformers.Trainer` (see the module's docstring). `run` is the hooks.Run
    of this life (made here unless given): its run directory is TRAINOPS_RUN_DIR's, its checkpoints go to
    `ckpt_dir` (give it to TrainingArguments as output_dir). TrainingArguments that break the contract
    (check_arguments) fail at on_train_begin, or with strict=False are journaled as warnings; an output_dir
    other than ckpt_dir always fails."""

    def __init__(self, run: hooks.Run | None = None, *, strict: bool = True) -> None:
        self.run = run if run is not None else hooks.Run()
        self.ckpt_dir = self.run.ckpt_dir
        self.strict = strict
        self.resumed_from: hooks.SealedCheckpoint | None = None
        self._max_steps: int | None = None
        self._step_ended = time.monotonic()
        self._stopping = False  # a signal reached this rank or another: save this step, stop, exit 75

    # ------------------------------------------------------------------------------ before train()

    def resume(self) -> str | None:
        """The path to give `trainer.train(resume_from_checkpoint=...)`: the newest checkpoint under ckpt_dir
        that verifies (recorded as this life's resume point, the journal cut back to it), or None. With several
        ranks (torch.distributed initialized) rank 0 chooses and moves newer broken ones aside, and every rank
        gets its answer."""
        found = self.run.resume()  # None on the other ranks
        self.resumed_from = found
        path = found.path if found is not None else None
        dist = _distributed()
        if dist is not None:
            chosen = [path]
            dist.broadcast_object_list(chosen, src=0)
            path = chosen[0]
        return path

    # ------------------------------------------------------------------------------ the Trainer's events

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        problems = check_arguments(args)
        if problems and self.strict:
            raise ValueError("trainops: TrainingArguments need " + "; ".join(problems))
        for problem in problems:
            self.run.event("warning", message="TrainingArguments need " + problem)
        if os.path.abspath(args.output_dir) != self.ckpt_dir:
            raise ValueError(
                f"trainops: TrainingArguments.output_dir is {args.output_dir}: give it the callback's ckpt_dir "
                f"({self.ckpt_dir}), where checkpoints are sealed and resumed from"
            )
        self._max_steps = state.max_steps

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs and "loss" in logs and state.is_world_process_zero:
            self.run.log_step(state.global_step, logs["loss"], lr=logs.get("learning_rate"))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_ended = time.monotonic()  # a save of this step follows the log: it stalls training from here
        if _stop_anywhere(self.run.stop_requested, args):  # every rank stops at the same step
            self._stopping = True
            # after DefaultFlowCallback: this step's checkpoint is written, then training stops
            control.should_save = True
            control.should_training_stop = True

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        _barrier()  # every rank's part of it written
        if state.is_world_process_zero:
            self.run.sync()  # the journal up to this step is durable before the checkpoint counts
            sealed = self.run.seal(path, state.global_step, producer=_producer())
            seconds = time.monotonic() - self._step_ended
            self.run.event(
                "save_end",
                step=state.global_step,
                path=sealed.path,
                seconds=seconds,
                stalled_s=seconds,
                bytes=sealed.bytes_total,
            )
        _barrier()  # nobody goes on (or exits) before it is sealed

    # ------------------------------------------------------------------------------ after train()

    def exit_code(self, trainer: Any) -> int:
        """result.json and the exit status once `trainer.train()` returned: 75 when a signal stopped it
        before its last step (checkpointed; run again to resume), else 0 with the final weights' sha256."""
        step = trainer.state.global_step
        done = self._max_steps is not None and step >= self._max_steps
        if self._stopping and not done:
            return self.run.interrupted(step)
        return self.run.finish(trainer.model, step=step)


def _distributed() -> Any:
    """torch.distributed when a process group of several ranks is up, else None."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def _barrier() -> None:
    dist = _distributed()
    if dist is not None:
        dist.barrier()


def _stop_anywhere(stop: bool, args: Any) -> bool:
    """Whether any rank was asked to stop (a MAX all-reduce of the flags at this step's end): a signal reaches
    ranks at different moments, and a rank that stopped a step before the others would leave them waiting."""
    dist = _distributed()
    if dist is None:
        return stop
    import torch

    flag = torch.tensor([1 if stop else 0], device=getattr(args, "device", "cpu"))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _producer() -> dict[str, str]:
    import transformers

    return {"framework": "transformers", "version": transformers.__version__}
