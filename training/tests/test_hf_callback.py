"""Hugging Face Trainer under trainops_train.hf, on this machine: training/examples/hf/train.py (a stock Trainer
script with the callback) run as real child processes, interrupted with real signals, resumed, and compared with
an uninterrupted run step by step (the loss and lr bits) and by its final weights.

- SIGTERM: the step in progress finishes, checkpoint-N is written and sealed at that step, the script exits 75;
  the next life resumes from it and ends bit-identical.
- SIGKILL: the next life resumes from the newest sealed checkpoint; a newer checkpoint-N the kill left unsealed
  (what the Trainer's own resume=True would take) is moved aside, never resumed; bit-identical again.
- checkpoint_verify knows the layout; the TrainingArguments that break the contract are refused by name.
The wrong resumes (HF_WRONG_RESUME) are drilled on a pod, tests/e2e/test_hf_drill.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
from trainer_harness import run_local_playbook

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

TRAINING = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = TRAINING / "examples" / "hf" / "train.py"
# 256 samples at batch 8: 32 steps an epoch, so the runs cross epochs and resume mid-epoch.
CONFIG = {"seed": 1234, "steps": 48, "checkpoint_every": 10}
TIMEOUT_S = 240


def _start(run_dir: pathlib.Path, **env: str) -> subprocess.Popen:
    config = run_dir.parent / f"{run_dir.name}-config.json"
    config.write_text(json.dumps(CONFIG))
    environ = {
        **os.environ,
        "PYTHONPATH": str(TRAINING),
        "TRAINOPS_RUN_DIR": str(run_dir),
        "TRAINOPS_CONFIG": str(config),
        "TRAINOPS_DRILL_STEP_DELAY_S": "0.05",
        "HF_HUB_OFFLINE": "1",
        **env,
    }
    log = open(run_dir.parent / f"{run_dir.name}.log", "ab")  # noqa: SIM115 - the child writes it
    try:
        return subprocess.Popen(
            [sys.executable, str(SCRIPT)],
            env=environ,
            stdout=log,
            stderr=subprocess.STDOUT,
            # the test's own dispositions are not the child's: SIGTERM and SIGINT must reach its handler
            preexec_fn=lambda: (
                signal.signal(signal.SIGTERM, signal.SIG_DFL),
                signal.signal(signal.SIGINT, signal.SIG_DFL),
            ),
        )
    finally:
        log.close()


def _run(run_dir: pathlib.Path, **env: str) -> int:
    return _start(run_dir, **env).wait(timeout=TIMEOUT_S)


def _journal(run_dir: pathlib.Path) -> dict[int, tuple[str, str]]:
    steps = {}
    for line in (run_dir / "logs" / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        steps[record["step"]] = (record["loss_hex"], record["lr_hex"])
    return steps


def _last_step(run_dir: pathlib.Path) -> int:
    path = run_dir / "logs" / "metrics.jsonl"
    if not path.exists():
        return 0
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return json.loads(lines[-1])["step"] if lines else 0


def _interrupt_at(run_dir: pathlib.Path, step: int, signum: int) -> int:
    child = _start(run_dir)
    deadline = time.monotonic() + TIMEOUT_S
    while _last_step(run_dir) < step:
        assert child.poll() is None, (run_dir.parent / f"{run_dir.name}.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the run did not reach the step"
        time.sleep(0.02)
    child.send_signal(signum)
    return child.wait(timeout=TIMEOUT_S)


def _events(run_dir: pathlib.Path, name: str) -> list[dict]:
    lines = (run_dir / "logs" / "events.jsonl").read_text().splitlines()
    return [event for event in map(json.loads, lines) if event["event"] == name]


def _result(run_dir: pathlib.Path) -> dict:
    return json.loads((run_dir / "logs" / "result.json").read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> pathlib.Path:
    run_dir = tmp_path_factory.mktemp("hf") / "reference"
    assert _run(run_dir) == 0, (run_dir.parent / "reference.log").read_text()[-3000:]
    assert sorted(_journal(run_dir)) == list(range(1, CONFIG["steps"] + 1))
    return run_dir


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> pathlib.Path:
    """A run killed at step 25 (checkpoint-20 sealed), and a torn checkpoint-30 beside it, as a kill in the
    middle of the Trainer's save leaves one (written in place, no seal)."""
    run_dir = tmp_path_factory.mktemp("hf") / "killed"
    assert _interrupt_at(run_dir, 25, signal.SIGKILL) == -signal.SIGKILL
    ckpt = run_dir / "ckpt"
    assert (ckpt / "checkpoint-20" / "trainops-seal.json").is_file() and not (ckpt / "checkpoint-30").exists()
    shutil.copytree(ckpt / "checkpoint-20", ckpt / "checkpoint-30")
    for name in ("trainops-seal.json", "SHA256SUMS", "optimizer.pt", "trainer_state.json"):
        (ckpt / "checkpoint-30" / name).unlink()
    return run_dir


def _resumed(killed: pathlib.Path, name: str, **env: str) -> pathlib.Path:
    run_dir = killed.parent / name
    shutil.copytree(killed, run_dir)
    assert _run(run_dir, **env) == 0, (run_dir.parent / f"{name}.log").read_text()[-3000:]
    return run_dir


def test_sigterm_saves_at_the_step_boundary_exits_75_and_resumes_bit_identical(reference, tmp_path):
    run_dir = tmp_path / "sigterm"
    assert _interrupt_at(run_dir, 14, signal.SIGTERM) == 75
    result = _result(run_dir)
    stopped = result["step"]
    assert result["status"] == "interrupted" and result["signal"] == "SIGTERM" and stopped >= 14, result
    assert result["checkpoint"] == str(run_dir / "ckpt" / f"checkpoint-{stopped}"), result
    assert (run_dir / "ckpt" / f"checkpoint-{stopped}" / "trainops-seal.json").is_file()
    assert max(_journal(run_dir)) == stopped  # nothing ran past the checkpoint
    assert _run(run_dir) == 0
    (resume,) = _events(run_dir, "resume")
    assert resume["step"] == stopped and resume["path"].endswith(f"checkpoint-{stopped}"), resume
    assert _journal(run_dir) == _journal(reference)
    assert _result(run_dir)["weights_sha256"] == _result(reference)["weights_sha256"]


def test_a_kill_resumes_from_the_newest_sealed_checkpoint_never_a_torn_one(reference, killed):
    run_dir = _resumed(killed, "resumed")
    (resume,) = _events(run_dir, "resume")
    assert resume["step"] == 20 and resume["path"].endswith("checkpoint-20"), resume
    (aside,) = _events(run_dir, "aside")
    assert aside["was"].endswith("checkpoint-30") and ".unsealed-" in aside["path"], aside
    assert _journal(run_dir) == _journal(reference)
    assert _result(run_dir)["weights_sha256"] == _result(reference)["weights_sha256"]
    # The checkpoint-30 of this life is its own, written again and sealed.
    assert (run_dir / "ckpt" / "checkpoint-30" / "trainops-seal.json").is_file()


VERIFY_PLAYBOOK = """
- name: checkpoint_verify over transformers checkpoints
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Each checkpoint, loaded as the Trainer resumes it
      trainops.gpu.checkpoint_verify: {path: "{{ item }}", kind: checkpoint, load: true}
      loop: "{{ checkpoints }}"
      register: verified
    - name: Write what each returned
      ansible.builtin.copy:
        content: "{{ verified.results | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""


def test_checkpoint_verify_knows_the_transformers_layout(reference, tmp_path):
    """Sealed, valid and loaded (weights by safetensors); a flipped byte in model.safetensors names the file; an
    optimizer.pt gone is named by the seal, and one sealed without it by the layout (nothing to resume from)."""
    sealed = reference / "ckpt" / "checkpoint-40"
    flipped, removed, resealed = (tmp_path / name for name in ("flipped", "removed", "resealed"))
    for copy in (flipped, removed, resealed):
        shutil.copytree(sealed, copy)
    weights = bytearray((flipped / "model.safetensors").read_bytes())
    weights[-10] ^= 0x01
    (flipped / "model.safetensors").write_bytes(bytes(weights))
    (removed / "optimizer.pt").unlink()
    for name in ("optimizer.pt", "SHA256SUMS", "trainops-seal.json"):
        (resealed / name).unlink()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from trainops_train.sealing import seal; seal(sys.argv[1], 40)",
            str(resealed),
        ],
        env={**os.environ, "PYTHONPATH": str(TRAINING)},
        check=True,
    )
    checkpoints = [str(path) for path in (sealed, flipped, removed, resealed)]
    variables = {"checkpoints": checkpoints, "ansible_python_interpreter": sys.executable}
    good, bad_byte, gone, without = run_local_playbook(tmp_path, "verify", VERIFY_PLAYBOOK, variables)
    [entry] = good["checkpoints"]
    assert good["valid"] and entry["framework"] == "transformers" and entry["layout"] == "directory", good
    loaded = good["loaded"]
    assert loaded["ok"] and loaded["files"] == 4 and "training_args.bin not loaded" in loaded["note"], loaded
    for report, error in (
        (bad_byte, "model.safetensors: sha256 mismatch"),
        (gone, "optimizer.pt: missing or not a regular file"),
        (without, "optimizer.pt missing: the Trainer resumes from it (saved with save_only_model?)"),
    ):
        [entry] = report["checkpoints"]
        assert not report["valid"] and error in " ".join(entry["errors"]), entry["errors"]


def test_arguments_that_break_the_contract_are_each_named():
    from trainops_train.hf import check_arguments
    from transformers import TrainingArguments

    good = {"output_dir": "/tmp/unused", "logging_steps": 1, "logging_nan_inf_filter": False, "report_to": "none"}
    assert check_arguments(TrainingArguments(**good)) == []
    bad = TrainingArguments(
        **{**good, "logging_steps": 10, "logging_nan_inf_filter": True},
        save_strategy="epoch",
        save_total_limit=3,
        save_only_model=True,
    )
    named = " | ".join(check_arguments(bad))
    for value in (
        "logging_steps=1",
        "logging_nan_inf_filter=False",
        "save_strategy 'steps' or 'no'",
        "save_total_limit=None",
        "save_only_model=False",
    ):
        assert value in named, named
