"""A user's own PyTorch loop (training/examples/plain/train.py) drilled on the podman emulator, as a user would:
their repository holds their script only (the hooks come from the training package the bootstrap role unpacks
on the pod), the drill runs it with resume_drill_train_command.

Two drills share one emulator:
- the loop before it adopted sealing (PLAIN_SEAL=0: torch.save alone, its own resume): kill resumes right, so
  its journal and final weights are judged identical, and the mode fails naming the unsealed checkpoint and how
  to seal it; sigterm restarts the epoch from its first batch and stop_start resumes without the optimizer's
  state, each failing naming the first step that differs (and the unsealed checkpoint);
- the loop with its ten lines of hooks, needing a package of its own (requirements.txt, from a wheel directory:
  the pod image does not have it): kill and stop_start pass bit-identical from a sealed checkpoint file, the
  venv built once before the reference run and reused, nothing installed, after the stop; sigterm reseeds the
  RNG and fails naming the first step that differs.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from drill_harness import ROOT, Drill, commit_tree, explain
from runpod_emulator.testing import EmulatorProcess
from wheels import write_wheel

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
    # The user's entry point needs a package the pod image lacks: the trainer process imports it, then runs the loop.
    (tmp / "src" / "run.py").write_text(
        "import runpy\nimport sys\n\nimport tinydep\n\n"
        "assert tinydep.ANSWER == 42 and sys.prefix != sys.base_prefix, (tinydep.__file__, sys.prefix)\n"
        'runpy.run_path("train.py", run_name="__main__")\n'
    )
    (tmp / "src" / "requirements.txt").write_text("tinydep==1.0\n")
    commit_tree(tmp / "src")
    (tmp / "wheels").mkdir()
    write_wheel(tmp / "wheels", "tinydep", "1.0", source="ANSWER = 42\n")
    with EmulatorProcess(
        backend="podman", state_dir=tmp / "emulator", extra_args=["--container-prefix", "rpown"]
    ) as emulator:
        yield Drill(emulator, tmp)


def _report(
    drill: Drill, run_id: str, env: dict[str, str], **extra: Any
) -> tuple[Any, dict[str, Any], dict[str, dict[str, Any]]]:
    done = drill.run({**COMMON, "resume_drill_run_id": run_id, "resume_drill_train_env": env, **extra})
    evidence = drill.runs / run_id / "evidence"
    assert (evidence / "report.json").is_file(), explain(done)
    report = json.loads((evidence / "report.json").read_text())
    return done, report, {mode["mode"]: mode for mode in report["modes"]}


def _first_difference(mode: dict[str, Any], expected_step: int) -> None:
    assert mode["status"] == "FAIL" and mode["first_differing_step"] == expected_step, mode
    assert f"step {expected_step}" in mode["reason"] and mode["weights"]["equal"] is False, mode["reason"]


@pytest.fixture(scope="module")
def unsealed(drill: Drill):
    # The loop's own resume takes the highest step-N.pt, complete or not: a kill landing in a torch.save would crash
    # its next life on the torn file (what sealing prevents). Checkpoints every 40 steps, the interruption at 42:
    # the next save is 38 paced steps (1.9 s) after the step the drill waits for.
    return _report(
        drill,
        "own-unsealed",
        {"PLAIN_SEAL": "0", "PLAIN_WRONG_RESUME": "sigterm=data,stop_start=optimizer"},
        resume_drill_train_config={**CONFIG, "checkpoint_every": 40},
        resume_drill_interrupt_at_step=42,
    )


@pytest.fixture(scope="module")
def sealed(drill: Drill):
    return _report(
        drill,
        "own-sealed",
        {"PLAIN_WRONG_RESUME": "sigterm=rng"},
        resume_drill_train_command=["python3", "run.py"],
        resume_drill_requirements="requirements.txt",
        resume_drill_requirements_wheels=str(drill.tmp / "wheels"),
    )


def test_unsealed_checkpoints_are_named_and_the_journal_and_weights_judged(drill: Drill, unsealed):
    done, report, modes = unsealed
    assert done.returncode != 0, explain(done)
    mode = modes["kill"]
    step = mode["resumed_from_step"]
    assert step == 40, mode
    assert mode["journal"]["equal"] is True and mode["weights"]["equal"] is True, mode
    assert mode["checkpoint"]["sealed"] is False and mode["checkpoint"]["name"] == f"step-{step}.pt", mode
    assert mode["status"] == "FAIL" and mode["reasons"] == [mode["checkpoint"]["detail"]], mode
    assert mode["reason"].startswith(f"checkpoint used is not sealed: step-{step}.pt: ")
    assert "trainops_train.hooks" in mode["reason"] and isinstance(mode["rto_s"], (int, float)), mode
    # sigterm restarted the epoch from its first batch; stop_start resumed without the optimizer's state: the
    # first step after the resumed one is still right (its loss is computed before the optimizer steps), the one
    # after is not. Their checkpoints are named unsealed too.
    sigterm, stop_start = modes["sigterm"], modes["stop_start"]
    _first_difference(sigterm, sigterm["resumed_from_step"] + 1)
    _first_difference(stop_start, stop_start["resumed_from_step"] + 2)
    for mode in (sigterm, stop_start):
        assert mode["checkpoint"]["sealed"] is False and mode["checkpoint"]["detail"] in mode["reasons"], mode
    # No requirements: no venv, in the report or in the provenance.
    assert report["venv"] is None and report["provenance"]["venv"] is None, report["venv"]
    markdown = (drill.runs / "own-unsealed" / "evidence" / "report.md").read_text()
    assert "checkpoint used is not sealed" in markdown and "command `python3 train.py`" in markdown, markdown
    assert "| unsealed | identical (100 steps) | identical |" in markdown, markdown
    verdict = " ".join(done.stdout.split())
    step = modes["kill"]["resumed_from_step"]
    assert "kill FAIL" in verdict and f"step {step} (step-{step}.pt, unsealed)" in verdict, explain(done)
    assert not [p for p in drill.pods_of("own-unsealed") if p["status"] != "TERMINATED"], drill.pods_of("own-unsealed")


def test_a_sealed_loop_passes_and_a_wrong_resume_fails_naming_its_first_step(drill: Drill, sealed):
    done, report, modes = sealed
    assert done.returncode != 0, explain(done)
    for name in ("kill", "stop_start"):
        mode = modes[name]
        assert mode["status"] == "PASS", mode
        assert mode["checkpoint"]["verified"] is True and mode["checkpoint"]["sealed"] is True, mode
        assert mode["checkpoint"]["name"] == f"step-{mode['resumed_from_step']}.pt", mode
        pulled = drill.runs / "own-sealed" / "modes" / f"own-sealed-{name}" / "ckpt"
        ckpt = mode["checkpoint"]["name"]
        assert {p.name for p in pulled.iterdir()} >= {ckpt, f"{ckpt}.SHA256SUMS", f"{ckpt}.trainops-seal.json"}
    # sigterm reseeded the RNG: dropout differs from the first step after the resume.
    _first_difference(modes["sigterm"], modes["sigterm"]["resumed_from_step"] + 1)
    verdict = " ".join(done.stdout.split())
    assert f"step {modes['sigterm']['first_differing_step']}" in verdict, explain(done)
    # The source pushed holds train.py only: the hooks it imported came from the package bootstrap unpacked.
    assert report["reference"]["status"] == "finished" and report["reference"]["weights_sha256"], report["reference"]


def test_the_requirements_venv_is_built_once_and_reused_after_the_stop(drill: Drill, sealed):
    """The trainer imported tinydep (run.py asserts it, inside a venv) in every life: the reference's, kill's, and
    stop_start's after the container disk was wiped. The venv was built by the first bootstrap and reused by the
    one after the stop, installing nothing; provenance.json records its pip freeze."""
    _done, report, modes = sealed
    venv = report["venv"]
    assert venv["requirements"] == "requirements.txt" and venv["freeze"] == ["tinydep==1.0"], venv
    assert venv["venv_dir"] == f"/workspace/cache/venvs/{venv['key']}", venv
    lives = {life["life"]: life for life in venv["lives"]}
    assert set(lives) == {"reference", "stop_start"}, venv["lives"]
    assert lives["reference"]["state"] == "built" and lives["stop_start"]["state"] == "reused", lives
    assert lives["reference"]["key"] == lives["stop_start"]["key"] == venv["key"], lives
    assert modes["kill"]["venv"] is None and modes["stop_start"]["venv"]["state"] == "reused"
    provenance = json.loads((drill.runs / "own-sealed" / "provenance.json").read_text())
    assert provenance["venv"]["freeze"] == ["tinydep==1.0"] and provenance["venv"]["key"] == venv["key"]
    markdown = (drill.runs / "own-sealed" / "evidence" / "report.md").read_text()
    assert "Requirements: `requirements.txt` in venv" in markdown and "stop_start reused in" in markdown, markdown
    print(
        f"venv built in {lives['reference']['seconds']} s, reused after the stop in {lives['stop_start']['seconds']} s"
    )
