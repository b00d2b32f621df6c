"""Bitwise resume: interrupted runs (SIGTERM or SIGKILL at random steps, 1 process or DDP with 2 ranks)
end with exactly the journal and final weights of an uninterrupted run."""

from __future__ import annotations

import random
import signal

import pytest
from trainer_harness import (
    EXIT_INTERRUPTED,
    PROCESS_TIMEOUT,
    events,
    interruption_seed,
    journal,
    kill_group,
    last_step,
    process_log,
    result,
    run_trainer,
    start_trainer,
    wait_for,
    write_config,
)
from trainops_train import checkpoint_format

# Steps of a few milliseconds, so that a random step can be hit by a signal from outside.
CONFIG = {"steps": 240, "model": {"hidden_dim": 192, "depth": 3}, "checkpoint": {"every_steps": 25, "keep_last": 2}}
INTERRUPTIONS = 2


def _interrupt_at(process, run_dir, target: int, sig: int) -> None:
    try:
        wait_for(lambda: last_step(run_dir) >= target or process.poll() is not None)
        assert process.poll() is None, f"the run ended before step {target}:\n{process_log(run_dir)}"
        if sig == signal.SIGKILL:
            kill_group(process, signal.SIGKILL)
        else:
            process.send_signal(sig)  # to the trainer, or to torchrun, which forwards it to every worker
            process.wait(timeout=PROCESS_TIMEOUT)
    finally:
        if process.poll() is None:  # a failed wait leaves no trainer (or torchrun worker) behind
            kill_group(process, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2], ids=["single", "ddp2"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_interrupted_runs_resume_bitwise(tmp_path, reference_runs, nproc, sig):
    seed = interruption_seed()
    chooser = random.Random(seed)
    reference = reference_runs(nproc, **CONFIG)
    config = write_config(tmp_path, **CONFIG)
    run_dir = tmp_path / "run"
    context = f"seed={seed} nproc={nproc} signal={signal.Signals(sig).name}"

    low = 5
    expected_resumes = 0
    for _interruption in range(INTERRUPTIONS):
        target = chooser.randrange(low, low + 70)
        newest_before = (
            checkpoint_format.verify_root(str(run_dir / "ckpt")).newest_valid if (run_dir / "ckpt").exists() else None
        )
        process = start_trainer(config, run_dir, nproc)
        _interrupt_at(process, run_dir, target, sig)
        rc = process.returncode
        report = checkpoint_format.verify_root(str(run_dir / "ckpt"))
        assert not report.corrupt, f"{context}: corrupt checkpoint after interruption: {report.to_dict()}"
        newest = report.newest_valid
        if sig == signal.SIGTERM:
            status = result(run_dir)
            expected_rc = EXIT_INTERRUPTED if nproc == 1 else 1  # torchrun turns any worker failure into 1
            assert rc == expected_rc, f"{context}: rc={rc}\n{process_log(run_dir)}"
            assert status["exit_code"] == EXIT_INTERRUPTED and status["status"] == "interrupted", status
            assert status["signal"] == "SIGTERM"
            # the checkpoint written on the way out is the step the run stopped at
            assert newest is not None and newest.step == status["step"] >= target, (context, status)
        else:
            assert rc != 0
        if newest_before is not None:
            # this life resumed from the newest valid checkpoint there was when it started
            expected_resumes += 1
            resumed = [e for e in events(run_dir) if e["event"] == "resume"]
            assert len(resumed) == expected_resumes and resumed[-1]["step"] == newest_before.step, context
        # the next interruption comes after the first checkpoint, so at least one life really resumes
        low = max(target, newest.step if newest else 0, CONFIG["checkpoint"]["every_steps"]) + 10

    final_start = checkpoint_format.verify_root(str(run_dir / "ckpt")).newest_valid
    assert final_start is not None and final_start.step > 0, f"{context}: no checkpoint to resume from"
    rc = run_trainer(config, run_dir, nproc)
    assert rc == 0, f"{context}:\n{process_log(run_dir)}"
    resumed = [e for e in events(run_dir) if e["event"] == "resume"]
    assert resumed and resumed[-1]["step"] == final_start.step, (context, resumed)
    if sig == signal.SIGTERM:
        assert len(resumed) == INTERRUPTIONS, (context, resumed)
    assert journal(run_dir) == journal(reference), f"{context}: metrics journal differs from the reference run"
    assert len(journal(run_dir)) == CONFIG["steps"]
    assert result(run_dir)["weights_sha256"] == result(reference)["weights_sha256"], context
    for checkpoint in checkpoint_format.verify_root(str(run_dir / "ckpt")).checkpoints:
        assert checkpoint.valid, checkpoint.errors
