"""A user's own PyTorch loop (training/examples/plain/train.py) drilled on the podman emulator, as a user would:
their repository holds their script only (the hooks come from the training package the bootstrap role unpacks
on the pod), the drill runs it with resume_drill_train_command.

Two drills share one emulator:
- the loop before it adopted sealing (PLAIN_SEAL=0: torch.save alone, its own resume): kill and sigterm resume
  right, so their journal and final weights are judged identical, and each mode fails naming the unsealed
  checkpoint and how to seal it; stop_start resumes without the optimizer's state and fails naming the step;
- the loop with its ten lines of hooks: kill passes bit-identical from a sealed checkpoint file; sigterm
  reseeds the RNG and stop_start restarts the epoch from its first batch, each failing naming the first step
  that differs.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from drill_harness import ROOT, Drill, commit_tree, explain
from runpod_emulator.testing import EmulatorProcess

pytestmark = [pytest.mark.podman, pytest.mark.slow]

# samples 2048 at batch 16: one epoch is 128 steps, longer than the run, so restarting the epoch at its
# first batch is wrong wherever the resume lands.
CONFIG = {"seed": 1234, "steps": 100, "checkpoint_every": 20, "samples": 2048}
COMMON = {
    "resume_drill_train_command": ["python3", "train.py"],
    "resume_drill_train_config": CONFIG,
    "resume_drill_interrupt_at_step": 25,
    "resume_drill_step_delay_s": 0.05,
    "resume_drill_modes": ["kill", "sigterm", "stop_start"],
}


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory, pod_image: str):
    tmp = tmp_path_factory.mktemp("own-trainer")
    (tmp / "key").mkdir()
    (tmp / "src").mkdir()
    shutil.copy(ROOT / "training" / "examples" / "plain" / "train.py", tmp / "src" / "train.py")
    commit_tree(tmp / "src")
    with EmulatorProcess(
        backend="podman", state_dir=tmp / "emulator", extra_args=["--container-prefix", "rpown"]
    ) as emulator:
        yield Drill(emulator, tmp)


def _report(drill: Drill, run_id: str, env: dict[str, str]) -> tuple[Any, dict[str, Any], dict[str, dict[str, Any]]]:
    done = drill.run({**COMMON, "resume_drill_run_id": run_id, "resume_drill_train_env": env})
    evidence = drill.runs / run_id / "evidence"
    assert (evidence / "report.json").is_file(), explain(done)
    report = json.loads((evidence / "report.json").read_text())
    return done, report, {mode["mode"]: mode for mode in report["modes"]}


def _first_difference(mode: dict[str, Any], expected_step: int) -> None:
    assert mode["status"] == "FAIL" and mode["first_differing_step"] == expected_step, mode
    assert f"step {expected_step}" in mode["reason"] and mode["weights"]["equal"] is False, mode["reason"]


@pytest.fixture(scope="module")
def unsealed(drill: Drill):
    return _report(drill, "own-unsealed", {"PLAIN_SEAL": "0", "PLAIN_WRONG_RESUME": "stop_start=optimizer"})


@pytest.fixture(scope="module")
def sealed(drill: Drill):
    return _report(drill, "own-sealed", {"PLAIN_WRONG_RESUME": "sigterm=rng,stop_start=data"})


def test_unsealed_checkpoints_are_named_and_the_journal_and_weights_judged(drill: Drill, unsealed):
    done, _report, modes = unsealed
    assert done.returncode != 0, explain(done)
    for name in ("kill", "sigterm"):
        mode = modes[name]
        step = mode["resumed_from_step"]
        assert isinstance(step, int) and step >= 20, mode
        assert mode["journal"]["equal"] is True and mode["weights"]["equal"] is True, mode
        assert mode["checkpoint"]["sealed"] is False and mode["checkpoint"]["name"] == f"step-{step}.pt", mode
        assert mode["status"] == "FAIL" and mode["reasons"] == [mode["checkpoint"]["detail"]], mode
        assert mode["reason"].startswith(f"checkpoint used is not sealed: step-{step}.pt: ")
        assert "trainops_train.hooks" in mode["reason"] and isinstance(mode["rto_s"], (int, float)), mode
    # stop_start resumed without the optimizer's state: the first step after the resumed one is still right
    # (its loss is computed before the optimizer steps), the one after is not.
    stop_start = modes["stop_start"]
    _first_difference(stop_start, stop_start["resumed_from_step"] + 2)
    markdown = (drill.runs / "own-unsealed" / "evidence" / "report.md").read_text()
    assert "checkpoint used is not sealed" in markdown and "command `python3 train.py`" in markdown, markdown
    assert "| unsealed | identical (100 steps) | identical |" in markdown, markdown
    verdict = " ".join(done.stdout.split())
    step = modes["kill"]["resumed_from_step"]
    assert "kill FAIL" in verdict and f"step {step} (step-{step}.pt, unsealed)" in verdict, explain(done)
    assert not [p for p in drill.pods_of("own-unsealed") if p["status"] != "TERMINATED"], drill.pods_of("own-unsealed")


def test_a_sealed_loop_passes_and_each_wrong_resume_fails_naming_its_first_step(drill: Drill, sealed):
    done, report, modes = sealed
    assert done.returncode != 0, explain(done)
    kill = modes["kill"]
    assert kill["status"] == "PASS", kill
    assert kill["checkpoint"]["verified"] is True and kill["checkpoint"]["sealed"] is True, kill
    assert kill["checkpoint"]["name"] == f"step-{kill['resumed_from_step']}.pt", kill
    pulled = drill.runs / "own-sealed" / "modes" / "own-sealed-kill" / "ckpt"
    name = kill["checkpoint"]["name"]
    assert {p.name for p in pulled.iterdir()} >= {name, f"{name}.SHA256SUMS", f"{name}.trainops-seal.json"}
    # sigterm reseeded the RNG (dropout differs from the first step after the resume); stop_start restarted the
    # epoch from its first batch.
    for name in ("sigterm", "stop_start"):
        _first_difference(modes[name], modes[name]["resumed_from_step"] + 1)
    verdict = " ".join(done.stdout.split())
    for name in ("sigterm", "stop_start"):
        assert f"step {modes[name]['first_differing_step']}" in verdict, explain(done)
    # The source pushed holds train.py only: the hooks it imported came from the package bootstrap unpacked.
    assert report["reference"]["status"] == "finished" and report["reference"]["weights_sha256"], report["reference"]
