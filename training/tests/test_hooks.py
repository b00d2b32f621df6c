"""The hooks a user's own loop adds (trainops_train.hooks): journal, resume, sealed checkpoints, graceful stop,
result.json. In process where that is enough; a real child process for signals and imports."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from trainops_train import checkpoint_format, hooks, journal
from trainops_train.hooks import Run

TRAINING = pathlib.Path(__file__).resolve().parents[1]


def _lines(path: pathlib.Path) -> list[dict]:
    return journal.read_records(str(path))


def test_a_life_journals_seals_and_ends_with_its_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINOPS_DRILL_STEP_DELAY_S", "0")
    model = torch.nn.Linear(3, 2)
    run = Run(tmp_path / "run", handle_signals=False)
    assert run.resume() is None
    loss = torch.tensor(0.1, dtype=torch.float32) * 3
    run.log_step(1, loss, lr=torch.tensor(1e-3, dtype=torch.float64), tokens=64)
    with run.checkpoint(os.path.join(run.ckpt_dir, "model-1.pt"), 1) as path:
        torch.save(model.state_dict(), path)
    assert run.finish(model) == hooks.EXIT_FINISHED

    logs = tmp_path / "run" / "logs"
    (line,) = _lines(logs / "metrics.jsonl")
    assert float.fromhex(line["loss_hex"]) == loss.item() and line["loss"] == repr(loss.item())
    assert float.fromhex(line["lr_hex"]) == 1e-3 and line["tokens"] == 64 and line["step"] == 1
    events = _lines(logs / "events.jsonl")
    assert [event["event"] for event in events] == ["start", "save_begin", "save_end", "exit"]
    save_end = events[2]
    assert save_end["step"] == 1 and save_end["seconds"] >= 0 and save_end["bytes"] > 0
    result = json.loads((logs / "result.json").read_text())
    assert result["status"] == "finished" and result["exit_code"] == 0 and result["step"] == 1
    assert result["weights_sha256"] == hooks.weights_sha256(model.state_dict())
    assert result["checkpoint"] == save_end["path"]
    assert checkpoint_format.verify_checkpoint(save_end["path"]).valid


def test_a_resumed_life_drops_the_dead_lifes_lines_past_its_checkpoint(tmp_path):
    first = Run(tmp_path, handle_signals=False, step_delay_s=0)
    for step in range(1, 6):
        first.log_step(step, float(step))
        if step == 3:
            with first.checkpoint(pathlib.Path(first.ckpt_dir) / f"step-{step}", step) as path:
                os.mkdir(path)
                pathlib.Path(path, "state.pt").write_bytes(b"state at 3")
    first.close()  # a kill: no result.json, journal lines 4 and 5 written after the checkpoint

    second = Run(tmp_path, handle_signals=False, step_delay_s=0)
    found = second.resume()
    assert found is not None and found.step == 3 and found.path.endswith("step-3")
    assert [line["step"] for line in _lines(tmp_path / "logs" / "metrics.jsonl")] == [1, 2, 3]
    second.log_step(4, 4.5)
    assert [line["loss"] for line in _lines(tmp_path / "logs" / "metrics.jsonl")] == ["1.0", "2.0", "3.0", "4.5"]
    resume = [event for event in _lines(tmp_path / "logs" / "events.jsonl") if event["event"] == "resume"]
    assert resume == [{**resume[0], "step": 3, "path": found.path, "journal_lines_dropped": 2}]
    assert second.interrupted() == hooks.EXIT_INTERRUPTED
    assert json.loads((tmp_path / "logs" / "result.json").read_text())["status"] == "interrupted"


def test_load_config_reads_the_path_in_trainops_config(tmp_path, monkeypatch):
    monkeypatch.delenv("TRAINOPS_CONFIG", raising=False)
    assert hooks.load_config({"steps": 5}) == {"steps": 5}
    config = tmp_path / "config.json"
    config.write_text('{"steps": 7}')
    monkeypatch.setenv("TRAINOPS_CONFIG", str(config))
    assert hooks.load_config({"steps": 5}) == {"steps": 7}
    config.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        hooks.load_config()


_CHILD = """
import sys, time
from trainops_train import hooks
assert "torch" not in sys.modules, "the hooks imported torch"
run = hooks.Run()
step = 0
print("ready", flush=True)
while step < 2000:
    step += 1
    run.log_step(step, 1.0 / step)
    if run.stop_requested:
        with run.checkpoint(f"{run.ckpt_dir}/state-{step}.txt", step) as path:
            open(path, "w").write(str(step))
        sys.exit(run.interrupted(step))
sys.exit(run.finish("0" * 64))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_at_the_step_boundary_with_a_sealed_checkpoint_and_exit_75(tmp_path, signum):
    env = {
        **os.environ,
        "PYTHONPATH": str(TRAINING),
        "TRAINOPS_RUN_DIR": str(tmp_path),
        "TRAINOPS_DRILL_STEP_DELAY_S": "0.01",
    }
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_CHILD)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM)],
    )
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.3)  # a few paced steps
    child.send_signal(signum)
    out, err = child.communicate(timeout=60)
    assert child.returncode == hooks.EXIT_INTERRUPTED, (out, err)
    result = json.loads((tmp_path / "logs" / "result.json").read_text())
    assert result["status"] == "interrupted" and result["signal"] == signal.Signals(signum).name
    steps = [line["step"] for line in _lines(tmp_path / "logs" / "metrics.jsonl")]
    assert 1 < steps[-1] < 2000 and steps == list(range(1, steps[-1] + 1)) and result["step"] == steps[-1]
    assert checkpoint_format.verify_checkpoint(str(tmp_path / "ckpt" / f"state-{steps[-1]}.txt")).valid


def test_weights_sha256_takes_zero_dim_tensors_and_matches_for_equal_weights():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))  # num_batches_tracked: 0-dim
    twin = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    twin.load_state_dict(model.state_dict())
    assert hooks.weights_sha256(model) == hooks.weights_sha256(twin.state_dict())
    with torch.no_grad():
        twin[0].bias[0] += 1e-7
    assert hooks.weights_sha256(model) != hooks.weights_sha256(twin)
