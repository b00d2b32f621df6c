"""A stock Hugging Face Trainer script (training/examples/hf/train.py, with trainops_train.hf's callback) drilled on
the podman emulator as a user would: their repository holds the script and its requirements.txt; transformers
reaches the pod through the requirements venv (from the wheels make setup downloaded: the pod image has none of
it), built once on the volume before the reference run and reused after the stop and the recreate.

One drill, four modes:
- kill and sigterm resume from a sealed checkpoint-N and PASS, journal and final weights bit-identical;
- stop_start with the data position not restored (ignore_data_skip) and recreate with rng_state.pth not
  restored (HF_WRONG_RESUME) each FAIL naming the first differing step, the step after the resume.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from drill_harness import ROOT, Drill, commit_tree, explain
from runpod_emulator.testing import EmulatorProcess

pytestmark = [pytest.mark.podman, pytest.mark.slow]

EXAMPLE = ROOT / "training" / "examples" / "hf"
WHEELS = ROOT / ".cache" / "wheels" / "hf"
RUN_ID = "hf-drill"


@pytest.fixture(scope="module")
def drilled(tmp_path_factory: pytest.TempPathFactory, pod_image: str) -> tuple[Any, dict[str, Any], Drill]:
    assert (WHEELS / ".requirements").is_file(), f"{WHEELS} is missing: make setup downloads the example's wheels"
    tmp = tmp_path_factory.mktemp("hf-drill")
    (tmp / "key").mkdir()
    (tmp / "src").mkdir()
    for name in ("train.py", "requirements.txt"):
        shutil.copy(EXAMPLE / name, tmp / "src" / name)
    commit_tree(tmp / "src")
    with EmulatorProcess(
        backend="podman", state_dir=tmp / "emulator", extra_args=["--container-prefix", "rphf"]
    ) as emulator:
        drill = Drill(emulator, tmp)
        done = drill.run(
            {
                "resume_drill_run_id": RUN_ID,
                "resume_drill_train_command": ["python3", "train.py"],
                "resume_drill_requirements": "requirements.txt",
                "resume_drill_requirements_wheels": str(WHEELS),
                # 256 samples at batch 8: 32 steps an epoch; the interruption at step 25 resumes from checkpoint-20,
                # mid-epoch (sigterm saves at its own step)
                "resume_drill_train_config": {"seed": 1234, "steps": 60, "checkpoint_every": 10},
                "resume_drill_interrupt_at_step": 25,
                "resume_drill_step_delay_s": 0.05,
                "resume_drill_modes": ["kill", "sigterm", "stop_start", "recreate"],
                "resume_drill_train_env": {"HF_WRONG_RESUME": "stop_start=data,recreate=rng"},
            }
        )
        report_path = drill.runs / RUN_ID / "evidence" / "report.json"
        assert report_path.is_file(), explain(done)
        yield done, json.loads(report_path.read_text()), drill


def test_kill_and_sigterm_resume_a_trainer_bit_identical_from_sealed_checkpoints(drilled):
    done, report, drill = drilled
    modes = {mode["mode"]: mode for mode in report["modes"]}
    for name in ("kill", "sigterm"):
        mode = modes[name]
        assert mode["status"] == "PASS", mode
        assert mode["journal"]["equal"] is True and mode["weights"]["equal"] is True, mode
        step = mode["resumed_from_step"]
        assert mode["checkpoint"]["name"] == f"checkpoint-{step}" and mode["checkpoint"]["sealed"] is True, mode
        assert mode["checkpoint"]["verified"] is True, mode
    # sigterm saved at the step it stopped on, past the last periodic checkpoint
    assert modes["sigterm"]["rpo_steps"] == 0, modes["sigterm"]
    pulled = drill.runs / RUN_ID / "modes" / f"{RUN_ID}-kill" / "ckpt" / modes["kill"]["checkpoint"]["name"]
    assert {"model.safetensors", "optimizer.pt", "rng_state.pth", "trainops-seal.json"} <= {
        p.name for p in pulled.iterdir()
    }
    assert report["reference"]["status"] == "finished" and report["reference"]["steps"] == 60, report["reference"]
    assert done.returncode != 0, explain(done)  # the two wrong resumes below fail the drill


def test_each_wrong_resume_fails_naming_the_step_after_it(drilled):
    done, report, _drill = drilled
    modes = {mode["mode"]: mode for mode in report["modes"]}
    verdict = " ".join(done.stdout.split())
    for name in ("stop_start", "recreate"):
        mode = modes[name]
        step = mode["resumed_from_step"] + 1
        assert mode["status"] == "FAIL" and mode["first_differing_step"] == step, mode
        assert f"step {step}" in mode["reason"] and mode["weights"]["equal"] is False, mode["reason"]
        assert mode["checkpoint"]["verified"] is True, mode  # the checkpoint was right; the resume was not
        assert f"step {step}" in verdict, explain(done)


def test_transformers_reached_the_pod_through_the_requirements_venv(drilled):
    _done, report, drill = drilled
    venv = report["venv"]
    assert "transformers==5.23.0" in venv["freeze"] and not [p for p in venv["freeze"] if p.startswith("torch")]
    lives = {life["life"]: life for life in venv["lives"]}
    assert set(lives) == {"reference", "stop_start", "recreate"}, venv["lives"]
    assert lives["reference"]["state"] == "built", lives
    assert lives["stop_start"]["state"] == lives["recreate"]["state"] == "reused", lives
    markdown = (drill.runs / RUN_ID / "evidence" / "report.md").read_text()
    assert "`transformers==5.23.0`" in markdown, markdown
    print(
        f"venv built in {lives['reference']['seconds']} s; reused in {lives['stop_start']['seconds']} s (stop_start),"
        f" {lives['recreate']['seconds']} s (recreate); drill {report['wall_s']} s"
    )
