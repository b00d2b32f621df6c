"""The command line contract: exit statuses, refusals before anything is created or changed, the writer
lock, and the telemetry hooks."""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time

import pytest
from trainer_harness import (
    EXIT_INTERRUPTED,
    TRAINING,
    events,
    journal,
    last_step,
    process_log,
    result,
    run_trainer,
    run_trainer_captured,
    start_trainer,
    trainer_env,
    wait_for,
    write_config,
)
from trainops_train import cadence, checkpoint_format
from trainops_train import config as config_lib
from trainops_train.trainer import StepRecord, Trainer

EXIT_USAGE = 2
BASE = {"steps": 120, "checkpoint": {"every_steps": 20, "keep_last": 3}}


def test_bad_config_is_refused_before_anything_is_created(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"steps": 10, "optim": {"learning_rate": 0.1}}))
    run_dir = tmp_path / "run"
    completed = run_trainer_captured(config, run_dir)
    assert completed.returncode == EXIT_USAGE, completed.stderr
    assert "unknown config key(s): optim.learning_rate" in completed.stderr
    assert not run_dir.exists()


@pytest.mark.slow
def test_resume_under_a_changed_config_is_refused_unless_allowed(tmp_path, reference_runs):
    pristine = reference_runs(1, **BASE)
    run_dir = tmp_path / "run"
    shutil.copytree(pristine, run_dir)
    before = sorted(p.name for p in (run_dir / "ckpt").iterdir())
    changed = write_config(tmp_path / "changed", **{**BASE, "steps": 140, "optim": {"lr": 0.02}})
    assert result(run_dir)["status"] == "finished"  # the pristine run's outcome, copied along
    completed = run_trainer_captured(changed, run_dir)
    assert completed.returncode == EXIT_USAGE, completed.stderr
    assert "refusing to resume from step 120: config hash" in completed.stderr
    assert "--allow-config-change" in completed.stderr
    assert sorted(p.name for p in (run_dir / "ckpt").iterdir()) == before
    assert journal(run_dir) == journal(pristine)
    # result.json tells this life's outcome, not the earlier run's "finished"
    refused = result(run_dir)
    assert refused["status"] == "refused" and refused["exit_code"] == EXIT_USAGE and refused["step"] == 120
    assert "config hash" in refused["reason"]

    rc = run_trainer(changed, run_dir, extra=("--allow-config-change",))
    assert rc == 0, process_log(run_dir)
    log = events(run_dir)
    assert [e["event"] for e in log if e["event"] in ("config_change_allowed", "resume")][-2:] == [
        "config_change_allowed",
        "resume",
    ]
    assert journal(run_dir)[:120] == journal(pristine) and len(journal(run_dir)) == 140
    newest = checkpoint_format.verify_root(str(run_dir / "ckpt")).newest_valid
    assert (
        newest is not None
        and newest.step == 140
        and newest.manifest["config_hash"]
        != (
            checkpoint_format.verify_checkpoint(str(pristine / "ckpt" / checkpoint_format.step_dirname(120))).manifest[
                "config_hash"
            ]
        )
    )


@pytest.mark.slow
def test_a_second_trainer_on_the_same_run_is_refused(tmp_path):
    config = write_config(tmp_path, steps=100000, checkpoint={"every_steps": 1000})
    run_dir = tmp_path / "run"
    first = start_trainer(config, run_dir)
    try:
        wait_for(lambda: last_step(run_dir) >= 1 or first.poll() is not None)
        second = run_trainer_captured(config, run_dir)
        assert second.returncode == EXIT_USAGE, second.stderr
        assert "another trainer is writing checkpoints" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        rc = first.wait(timeout=120)
    assert rc == EXIT_INTERRUPTED, process_log(run_dir)
    status = result(run_dir)
    assert status["status"] == "interrupted" and status["signal"] == "SIGTERM"
    newest = checkpoint_format.verify_root(str(run_dir / "ckpt")).newest_valid
    assert newest is not None and newest.step == status["step"]


def ignore_stop_signals() -> None:
    """As in anything started with `&` from a script (SIGINT) or by a supervisor that ignores them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_trainer_started_with_the_stop_signals_ignored_still_stops_on_them(tmp_path, sig):
    # The trainer installs its own handlers: an inherited SIG_IGN does not make it unstoppable.
    config = write_config(tmp_path, steps=100000, checkpoint={"every_steps": 1000})
    run_dir = tmp_path / "run"
    process = start_trainer(config, run_dir, preexec_fn=ignore_stop_signals)
    try:
        wait_for(lambda: last_step(run_dir) >= 1 or process.poll() is not None)
        process.send_signal(sig)
        rc = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert rc == EXIT_INTERRUPTED, process_log(run_dir)
    assert result(run_dir)["signal"] == signal.Signals(sig).name


def test_sigterm_during_startup_exits_resumable_without_training(tmp_path):
    config = write_config(tmp_path)
    run_dir = tmp_path / "run"
    process = start_trainer(config, run_dir)
    # the handlers are installed before torch is imported, which takes a second or more
    time.sleep(0.3)
    process.send_signal(signal.SIGTERM)
    rc = process.wait(timeout=120)
    assert rc == EXIT_INTERRUPTED, process_log(run_dir)
    status = result(run_dir)
    assert status["status"] == "interrupted" and status["step"] == 0 and status["signal"] == "SIGTERM"
    assert journal(run_dir) == []


def test_telemetry_hooks_see_every_step(tmp_path, monkeypatch):
    hook_module = tmp_path / "hooks_for_test.py"
    hook_module.write_text("RECORDS = []\n\ndef collect(record):\n    RECORDS.append(record)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(TRAINING))
    for variable in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(variable, raising=False)
    direct: list[StepRecord] = []
    config = config_lib.from_dict({"steps": 25, "telemetry_hooks": ["hooks_for_test:collect"]})
    outcome = Trainer(config, str(tmp_path / "run"), hooks=[direct.append]).run()
    import hooks_for_test

    assert outcome.exit_code == 0 and outcome.step == 25
    assert [r.step for r in direct] == list(range(1, 26))
    assert direct == hooks_for_test.RECORDS
    assert [(r.step, float.hex(r.loss), float.hex(r.lr)) for r in direct] == journal(tmp_path / "run")
    assert sys.modules["hooks_for_test"] is hooks_for_test


def test_a_failed_life_replaces_the_previous_result(tmp_path):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "failing_hook.py").write_text(
        "def fail_at_step_5(record):\n    if record.step == 5:\n        raise RuntimeError('hook gave up')\n"
    )
    config = write_config(tmp_path, steps=20, telemetry_hooks=["failing_hook:fail_at_step_5"])
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "result.json").write_text(json.dumps({"status": "finished", "exit_code": 0, "step": 20}))
    env = trainer_env()
    env["PYTHONPATH"] = f"{TRAINING}:{hooks}"
    completed = run_trainer_captured(config, run_dir, env=env)
    assert completed.returncode == 1, completed.stderr
    assert "hook gave up" in completed.stderr
    failed = result(run_dir)
    assert failed["status"] == "failed" and failed["exit_code"] == 1 and failed["weights_sha256"] is None
    assert failed["reason"] == "RuntimeError: hook gave up"
    assert [step for step, _loss, _lr in journal(run_dir)] == [1, 2, 3, 4, 5]


def test_auto_cadence_is_dalys_interval_of_the_measured_save_times(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TRAINING))
    for variable in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(variable, raising=False)
    mtbi = 0.2
    config = config_lib.from_dict({"steps": 400, "checkpoint": {"mode": "auto", "mtbi_seconds": mtbi, "keep_last": 2}})
    run_dir = tmp_path / "run"
    assert Trainer(config, str(run_dir)).run().exit_code == 0
    log = events(run_dir)
    begins = {e["step"]: e["time"] for e in log if e["event"] == "save_begin"}
    saves = [e for e in log if e["event"] == "save_end"]
    assert saves[0]["step"] == 1  # the first save comes at once: it measures C
    assert len(saves) >= 3, saves
    measured = []
    for save, following in zip(saves, [*saves[1:], None], strict=True):
        measured.append(save["stalled_s"])
        recent = measured[-5:]
        assert save["next_interval_s"] == cadence.daly_interval(sum(recent) / len(recent), mtbi), save
        if following is not None and following["step"] != config.steps:  # the final save is not cadence's
            assert begins[following["step"]] - save["time"] >= save["next_interval_s"] - 0.005, (save, following)
